"""Memory readings from every source behind one interface: NVML, nvidia-smi,
rocm-smi, host (runner RSS and system totals) and Ollama's own ``/api/ps``
estimate, plus the selector that picks the one to trust here."""
from probes.memory.base import DeviceInfo, DeviceReading, MemoryReader, ProcessUsage, Reading, devices_of
from probes.memory.host import HostReader, is_ollama_runner
from probes.memory.nvidia_smi import NvidiaSmiReader
from probes.memory.nvml import NvmlReader
from probes.memory.ollama_ps import OllamaEstimate, OllamaPsReader, fetch_ps, ollama_estimate
from probes.memory.rocm_smi import RocmSmiReader
from probes.memory.select import SOURCE_ORDER, Selection, SourceStatus, select_reader

__all__ = [
    "DeviceInfo", "DeviceReading", "MemoryReader", "ProcessUsage", "Reading", "devices_of",
    "HostReader", "is_ollama_runner", "NvidiaSmiReader", "NvmlReader", "RocmSmiReader",
    "OllamaEstimate", "OllamaPsReader", "fetch_ps", "ollama_estimate",
    "SOURCE_ORDER", "Selection", "SourceStatus", "select_reader",
]
