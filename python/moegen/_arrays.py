"""Arrays and tensors into the descriptors moegen's Rust side checks: host arrays as
`(name, dtype, shape, bytes)` (NumPy arrays, DLPack producers, CPU torch tensors) and CUDA
tensors as `(name, dtype, shape, contiguous, device, address)`. Dtype, shape and device are
checked on the Rust side, which names the argument."""

from ._errors import InputError


def is_torch(a):
    """Whether `a` is a torch tensor (without importing torch)."""
    return type(a).__module__.startswith("torch") and hasattr(a, "data_ptr")


def _numpy():
    try:
        import numpy
    except ImportError as e:  # pragma: no cover - exercised only without numpy
        raise InputError(
            "host arrays need NumPy (pip install numpy): " + str(e)
        ) from e
    return numpy


def host(name, a):
    """A host array's descriptor: its elements row-major and little-endian."""
    if is_torch(a):
        import torch

        t = a.detach().to("cpu").contiguous()
        dtype = str(t.dtype).replace("torch.", "")
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        return (name, dtype, list(t.shape), raw)
    np = _numpy()
    if not isinstance(a, np.ndarray):
        if hasattr(a, "__dlpack__"):
            a = np.from_dlpack(a)
        else:
            a = np.asarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    a = np.ascontiguousarray(a)
    return (name, a.dtype.name, list(a.shape), a.tobytes())


def device(name, t):
    """A torch tensor's descriptor for the device path (its address, not its bytes)."""
    if not is_torch(t):
        raise InputError(f"{name}: a torch tensor is needed here, got {type(t).__name__}")
    return (
        name,
        str(t.dtype).replace("torch.", ""),
        list(t.shape),
        bool(t.is_contiguous()),
        device_name(t.device),
        int(t.data_ptr()),
    )


def device_name(d):
    """`cpu` or `cuda:N`, the spelling the Rust side compares."""
    if d.type == "cuda":
        import torch

        index = d.index if d.index is not None else torch.cuda.current_device()
        return f"cuda:{index}"
    return str(d.type)


def bf16_to_float32(raw, shape):
    """bf16 bytes (little-endian) as a float32 NumPy array: an exact widening."""
    np = _numpy()
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32).reshape(shape)
