"""deep_ep.utils.event on epjit: EventHandle (a CUDA event recorded on the stream
current at its creation; on host ranks, whose calls are final on return, a
completed marker) and EventOverlap, DeepEP's wrapper around it."""


class EventHandle:
    """DeepEP's EventHandle: records an event on torch's current CUDA stream when
    made (Buffer.capture()), or on the stream given; current_stream_wait() makes
    torch's current stream wait for it. Without a GPU it is already complete."""

    def __init__(self, stream=None):
        self._event = None
        try:
            import torch
        except ImportError:  # pragma: no cover - epjit.deep_ep needs torch
            return
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self._event = torch.cuda.Event()
            self._event.record(stream if stream is not None else torch.cuda.current_stream())

    def current_stream_wait(self):
        if self._event is not None:
            import torch
            torch.cuda.current_stream().wait_event(self._event)

    def synchronize(self):
        if self._event is not None:
            self._event.synchronize()


class EventOverlap:
    """DeepEP's EventOverlap: `with event:` runs the block on the current stream,
    then makes it wait for the event; current_stream_wait() waits at once."""

    def __init__(self, event=None, extra_tensors=None):
        self.event = event
        self.extra_tensors = extra_tensors
        self._release_handle_by_call = False
        self.hook_after_wait = None

    def current_stream_wait(self, release_handle=False):
        assert self.event is not None
        self.event.current_stream_wait()
        if self.hook_after_wait is not None:
            self.hook_after_wait()
            self.hook_after_wait = None
        if release_handle:
            self.event = None

    def register_hook_after_wait(self, hook_after_wait):
        assert self.hook_after_wait is None, "A hook is already registered on this `EventOverlap`"
        self.hook_after_wait = hook_after_wait

    def __call__(self, release_handle=False):
        self._release_handle_by_call = release_handle
        return self

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        if self.event is not None:
            self.current_stream_wait(release_handle=self._release_handle_by_call)
        self._release_handle_by_call = False
