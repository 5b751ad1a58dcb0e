"""Arrays as epjit's calls take them: what each spelling of a dtype names (from
the native element-type table), the target's fp8 flavour, numpy and torch
arrays as the native module imports them, and torch's current stream."""
from . import _epjit
from ._epjit import Error

try:
    import numpy as _np
except ImportError:  # pragma: no cover
    _np = None

# The native element-type table (ep::element_types), read once: what each
# spelling of a payload type (config strings, numpy/ml_dtypes and torch
# dtypes) names, and which fp8 format each fp8 dtype is.
_ELEMENT_TYPES = _epjit.element_types()
_DTYPE_NAMES = dict(_epjit.data_type_spellings())
for _row in _ELEMENT_TYPES:
    if _row["payload"] is not None:
        for _spelling in (_row["name"], _row["framework_name"], "torch." + _row["framework_name"]):
            _DTYPE_NAMES[_spelling] = _row["payload"]


def _dtype_name(value, field):
    if value is None:
        return None
    name = _DTYPE_NAMES.get(str(value)) or _DTYPE_NAMES.get(getattr(value, "name", ""))
    if name is None:
        raise ValueError(f"{field}={value!r} is not a dtype epjit knows: bf16, f32, fp8 or fp4 "
                         "(as strings, numpy/ml_dtypes or torch dtypes)")
    return name


_raw_stream_query = None


def _current_stream_handle(tensor):
    """torch's current stream on the tensor's GPU, as a handle: torch's raw query
    (what Triton's launcher calls; torch.cuda.current_stream() builds a Stream
    object each call), else the Stream object's handle."""
    global _raw_stream_query
    if _raw_stream_query is None:
        import torch
        query = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _raw_stream_query = ((lambda t: query(t.get_device())) if query is not None
                             else (lambda t: torch.cuda.current_stream(t.device).cuda_stream))
    return _raw_stream_query(tensor)


def _torch_device():
    """("cuda" or "hip", ordinal) for torch's current GPU (NVIDIA or ROCm builds:
    the epjit device kind follows the vendor), else ("host", 0): the device a
    framework layer (epjit.mori, epjit.deep_ep) joins ranks on by default."""
    try:
        import torch
    except ImportError:
        return "host", 0
    if not torch.cuda.is_available():
        return "host", 0
    kind = "hip" if getattr(torch.version, "hip", None) else "cuda"
    return kind, torch.cuda.current_device()


def _is_torch(value):
    return type(value).__module__.startswith("torch")


# ml_dtypes' and torch's fp8 dtype names, with their formats.
_NUMPY_FP8 = {row["framework_name"]: row["fp8"] for row in _ELEMENT_TYPES if row["fp8"] is not None}


def _target_fp8(target):
    """The target's fp8 flavor: "e4m3fn" (OCP) or "e4m3fnuz" (gfx942)."""
    for row in _epjit.targets():
        if row["name"] == target:
            return row["fp8"]
    return "e4m3fn"


def _to_native(value, target=None, fp8="e4m3fn"):
    """numpy arrays whose dtypes DLPack cannot carry go as their bits: bf16
    (ml_dtypes) as uint16, fp8 (ml_dtypes, the target's flavor `fp8`) as
    uint8; everything else as is (DLPack)."""
    if _is_torch(value):
        dtype = value.dtype
        name = str(dtype).replace("torch.", "") if dtype.itemsize == 1 and dtype.is_floating_point else None
        if name in _NUMPY_FP8:  # the flavor checked here, then its bytes (DLPack fp8 support varies)
            _require_fp8_flavor(name, target, fp8, "torch.")
            import torch
            return value.view(torch.uint8)
        return value
    if _np is None or not isinstance(value, _np.ndarray):
        return value
    name = value.dtype.name
    if name == "bfloat16":
        return value.view(_np.uint16)
    if name in _NUMPY_FP8:
        _require_fp8_flavor(name, target, fp8, "ml_dtypes.")
        return value.view(_np.uint8)
    return value


def _require_fp8_flavor(name, target, wanted, module):
    if _NUMPY_FP8[name] != wanted:
        raise Error(f"input is {module}{name} (expected {module}float8_{wanted}, the fp8 of target {target}); "
                    f"fix: convert the input to {module}float8_{wanted}")
