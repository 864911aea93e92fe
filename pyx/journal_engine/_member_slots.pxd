# Member descriptors for the fields of a compiled class, as ``__slots__`` gives a Python class.
#
# Cython exposes a ``cdef public`` or ``readonly`` object field through a getset descriptor, which
# Python 3.11's attribute specialisation passes over (a generic lookup, about 10 ns more per read than
# a slot's). A field read once per message or record is exposed through a member descriptor instead.
# Only for fields that are never NULL once the object is made (a member descriptor of type
# T_OBJECT_EX raises AttributeError on NULL, where the getset descriptor gave None).
from cpython.mem cimport PyMem_Malloc
from cpython.object cimport PyObject, PyTypeObject

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
        const char *doc
    object PyDescr_NewMember(PyTypeObject *, PyMemberDef *)
    void PyType_Modified(PyTypeObject *)

cdef extern from "structmember.h":
    int T_OBJECT_EX
    int READONLY


cdef inline Py_ssize_t offset_holding(object instance, object value) except -1:
    """Where in ``instance``'s C struct the pointer to ``value`` is."""
    cdef char *base = <char *><PyObject *>instance
    cdef Py_ssize_t offset
    for offset in range(sizeof(PyObject), type(instance).__basicsize__, sizeof(void *)):
        if (<PyObject **>(base + offset))[0] == <PyObject *>value:
            return offset
    raise RuntimeError(f"{type(instance).__name__}: no field holds the probe")


cdef inline int expose_as_members(type cls, tuple fields, object probe, tuple markers, bint readonly,
                                  list names) except -1:
    """Replace the getset descriptors of ``cls``'s ``fields`` with member descriptors. ``probe`` is an
    instance whose fields hold the distinct ``markers`` (to find their offsets); ``names`` keeps the
    encoded names the descriptors point at for the module's life."""
    cdef PyTypeObject *t = <PyTypeObject *>cls
    cdef PyMemberDef *members = <PyMemberDef *>PyMem_Malloc(len(fields) * sizeof(PyMemberDef))
    if members == NULL:
        raise MemoryError()
    for i, name in enumerate(fields):
        encoded = name.encode("ascii")
        names.append(encoded)
        members[i].name = encoded
        members[i].type = T_OBJECT_EX
        members[i].offset = offset_holding(probe, markers[i])
        members[i].flags = READONLY if readonly else 0
        members[i].doc = NULL
        (<dict>t.tp_dict)[name] = PyDescr_NewMember(t, &members[i])
    PyType_Modified(t)
    return 0
