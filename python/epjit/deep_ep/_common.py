"""What epjit.deep_ep's modules share: torch, imported when first used (the
package imports without it), and the refusal of what epjit does not serve."""


def _torch():
    import torch
    return torch


def _refuse(what, why, fix):
    raise NotImplementedError(f"epjit.deep_ep: {what} is not served: {why}; fix: {fix}")
