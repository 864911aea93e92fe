"""Builds the compiled core (pyx/journal_engine/*.pyx) into journal_engine's extension modules.

Directives are set here once. JOURNAL_ENGINE_DEBUG_BUILD=1 builds with line
tracing, bounds checks and annotated HTML (cython -a) for profiling.
"""
import os
from glob import glob

from setuptools import Extension, setup
from Cython.Build import cythonize

DEBUG = os.environ.get("JOURNAL_ENGINE_DEBUG_BUILD") == "1"

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
for source in sorted(glob("pyx/journal_engine/*.pyx")):
    name = "journal_engine." + os.path.splitext(os.path.basename(source))[0]
    extensions.append(Extension(
        name,
        [source],
        include_dirs=["pyx/journal_engine"],
        extra_compile_args=["-O3"] + (["-DJOURNAL_ENGINE_DEBUG=1"] if DEBUG else []),
        define_macros=[("CYTHON_TRACE_NOGIL", "1")] if DEBUG else [],
    ))

setup(
    ext_modules=cythonize(extensions, include_path=["pyx"], compiler_directives=directives,
                          annotate=DEBUG),
)
