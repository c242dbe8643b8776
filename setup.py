"""The one part of the build pyproject.toml cannot state stably: the compiled record walk.

``storage/records/_cwalk.c`` (plain C against the Python C API; see its top comment) becomes
``kafkasim.storage.records._cwalk``. It is optional: where no C compiler or Python headers are
found the install goes on without it, and ``storage.records.validation`` walks records in
Python (the same checks, the same answers). ``./dev`` installs gcc and the headers.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafkasim.storage.records._cwalk",
            sources=["storage/records/_cwalk.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"],
            optional=True,
        )
    ]
)
