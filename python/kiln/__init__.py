"""Python bindings for kiln (ctypes over libkiln, the stable C API in include/kiln.h)."""
from ._lib import KilnError, build_commit, build_number, load_library, system_info  # noqa: F401
from .engine import Context, Model  # noqa: F401
