"""kafkasim: a Kafka-style replicated commit log in Python.

Installed, everything lives under this one import name. In the repository the subpackages are
the top-level folders (``storage/``, ``node/``, ``controller/``, ...); ``kafkasim/`` holds a
symbolic link to each, so that the repository, editable installs, mypy and the built wheel all
see the same dotted names (``kafkasim.storage.log``) and nothing else lands in site-packages.
"""

__version__ = "0.1.0"
