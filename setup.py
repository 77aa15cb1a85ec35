"""The one thing pyproject.toml cannot say: kwire's optional compiled helper.

``kwire.protocol.records._layout`` reads the fields of v2 records in one compiled pass (the
Spark source's column-wise reader uses it).  It is optional: without a C compiler and Python's
headers the build goes on without it, and kwire falls back to the same work in Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kwire.protocol.records._layout",
            sources=["src/kwire/protocol/records/_layout.c"],
            optional=True,
        ),
    ],
)
