"""Builds the compiled core (pyx/journal_engine/*.pyx) into journal_engine's extension modules.

Directives are set here once. JOURNAL_ENGINE_DEBUG_BUILD=1 builds with line
tracing, bounds checks and annotated HTML (cython -a) for profiling.

The build stops with an error when the compiled sources are missing (an sdist
made without MANIFEST.in) or Cython is not installed: a silent fallback would
install a package that runs only the Python twin (IMPLEMENTATION == "python").
"""
import os
import sys
from glob import glob

from setuptools import Extension, setup

PYX_DIR = "pyx/journal_engine"   # relative to the project root, where pip runs setup.py; setuptools wants relative paths
DEBUG = os.environ.get("JOURNAL_ENGINE_DEBUG_BUILD") == "1"


def fail(message):
    sys.exit(f"journal_engine build error: {message}")


sources = sorted(glob(f"{PYX_DIR}/*.pyx"))
if not sources:
    fail(f"no Cython sources found in {os.path.abspath(PYX_DIR)} (expected *.pyx, *.pxd, *.h). "
         "Build from a git checkout or from an sdist made with MANIFEST.in; "
         "without them the package would install only the Python twin.")

try:
    from Cython.Build import cythonize
except ImportError as exc:
    fail(f"Cython is not installed ({exc}); it is needed to build the compiled core. "
         "`pip install .` fetches it (pyproject.toml's build-system requires); "
         "with --no-build-isolation, install it first: pip install 'Cython>=3.0,<4'")

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": DEBUG,
    "embedsignature": True,
    "linetrace": DEBUG,
}

extensions = []
for source in sources:
    name = "journal_engine." + os.path.splitext(os.path.basename(source))[0]
    extensions.append(Extension(
        name,
        [source],
        include_dirs=[PYX_DIR],
        extra_compile_args=["-O3"],
        define_macros=[("CYTHON_TRACE_NOGIL", "1")] if DEBUG else [],
    ))

# Not a Python module: the crash harness's LD_PRELOAD recorder of file-system calls (simulated power
# loss, docs/crash-testing.md), built here so that every install, the sdist's included, carries it.
io_recorder = Extension(
    "journal_engine.crashtest._iorecord",
    ["journal_engine/crashtest/iorecord.c"],
    extra_compile_args=["-O2"],
    libraries=["dl", "pthread"],
)

setup(
    ext_modules=cythonize(extensions, include_path=["pyx"], compiler_directives=directives,
                          annotate=DEBUG) + [io_recorder],
)
