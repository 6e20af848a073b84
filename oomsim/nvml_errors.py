"""pynvml's exceptions, as the library shapes them, for the stand-ins of
``pynvml`` (the simulator's :class:`oomsim.devices.SimNvml` and the unit
tests' queue-driven fake): ``NVMLError(code)`` is an instance of the code's
subclass (``NVMLError(3)`` is an ``NVMLError_NotSupported``), ``.value`` is
the nvml.h return code and ``str()`` the library's own message. A code with
no message is "NVML Error with code N", as pynvml prints it when
``nvmlErrorString`` cannot answer.
"""
from __future__ import annotations

# nvml.h return codes, with pynvml's class-name suffix and message
ERRORS: dict[int, tuple[str, str]] = {
    1: ("Uninitialized", "Uninitialized"),
    2: ("InvalidArgument", "Invalid Argument"),
    3: ("NotSupported", "Not Supported"),
    4: ("NoPermission", "Insufficient Permissions"),
    6: ("NotFound", "Not Found"),
    9: ("DriverNotLoaded", "Driver Not Loaded"),
    12: ("LibraryNotFound", "NVML Shared Library Not Found"),
    13: ("FunctionNotFound", "Function Not Found"),
    15: ("GpuIsLost", "GPU is lost"),
    18: ("LibRmVersionMismatch", "RM has detected an NVML/RM version mismatch."),
    999: ("Unknown", "Unknown Error"),
}
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12


class NVMLError(Exception):
    """Like pynvml.NVMLError: ``NVMLError(3)`` is an ``NVMLError_NotSupported``."""

    classes: dict[int, type] = {}

    def __new__(cls, value=None):
        if cls is NVMLError:
            cls = NVMLError.classes.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value=None):
        super().__init__(self.value)

    def __str__(self):
        return ERRORS.get(self.value, ("", f"NVML Error with code {self.value}"))[1]


def _subclass(code: int, name: str) -> type:
    def new(cls, *args):
        return NVMLError.__new__(cls, code)
    klass = type(f"NVMLError_{name}", (NVMLError,), {"__new__": new, "__module__": __name__})
    NVMLError.classes[code] = klass
    return klass


#: ``NVMLError_<name>`` for every code above, by name
SUBCLASSES: dict[str, type] = {f"NVMLError_{name}": _subclass(code, name) for code, (name, _) in ERRORS.items()}
globals().update(SUBCLASSES)
NVMLError_Uninitialized = SUBCLASSES["NVMLError_Uninitialized"]
NVMLError_InvalidArgument = SUBCLASSES["NVMLError_InvalidArgument"]
NVMLError_LibraryNotFound = SUBCLASSES["NVMLError_LibraryNotFound"]
