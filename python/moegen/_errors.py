"""moegen's exceptions. Each carries the message of the Rust error it stands for, unchanged
(moegen's own text, naming the input at fault)."""


class MoegenError(Exception):
    """Base class of every error moegen raises."""


class InputError(MoegenError, ValueError):
    """An argument of the wrong dtype, shape, device or layout, refused before it reaches
    the layer (the message names the argument)."""


class WeightError(MoegenError, ValueError):
    """Weights moegen cannot load or prepare: a tensor missing, of the wrong shape or
    dtype, an invalid scale code (the message names the tensor)."""


class LayerError(MoegenError):
    """The layer refused the pass or could not be built: too many tokens, no tactic of the
    kernel set for this shape (with each tactic's reason), a workspace it cannot serve."""


class RoutingError(LayerError):
    """A check only the device can run failed, decoded from the routing kernels' error
    record: an expert id out of range, one expert twice in a token, a non-finite router
    weight (the message names token and slot)."""


class DeviceError(MoegenError):
    """The backend failed: a CUDA driver error (with the call), or the simulator's fault."""


class UnsupportedError(MoegenError):
    """A device or operation this build or this layer cannot serve (e.g. CUDA in a wheel
    built without the `cuda` feature)."""


__all__ = [
    "MoegenError",
    "InputError",
    "WeightError",
    "LayerError",
    "RoutingError",
    "DeviceError",
    "UnsupportedError",
]
