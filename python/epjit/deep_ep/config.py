"""deep_ep.Config on epjit: DeepEP's tuning record (SMs and chunk sizes). epjit
plans its own geometry per target (its schedule), so a Config passed to a call
is checked and kept, never applied; Buffer.set_num_sms sets the block counts of
the ops built after it."""


class Config:
    def __init__(self, num_sms=20, num_max_nvl_chunked_send_tokens=6, num_max_nvl_chunked_recv_tokens=256,
                 num_max_rdma_chunked_send_tokens=6, num_max_rdma_chunked_recv_tokens=128):
        for name, value in (("num_sms", num_sms), ("num_max_nvl_chunked_send_tokens", num_max_nvl_chunked_send_tokens),
                            ("num_max_nvl_chunked_recv_tokens", num_max_nvl_chunked_recv_tokens),
                            ("num_max_rdma_chunked_send_tokens", num_max_rdma_chunked_send_tokens),
                            ("num_max_rdma_chunked_recv_tokens", num_max_rdma_chunked_recv_tokens)):
            if int(value) <= 0:
                raise ValueError(f"Config.{name}={value}: expected a positive number")
        self.num_sms = int(num_sms)
        self.num_max_nvl_chunked_send_tokens = int(num_max_nvl_chunked_send_tokens)
        self.num_max_nvl_chunked_recv_tokens = int(num_max_nvl_chunked_recv_tokens)
        self.num_max_rdma_chunked_send_tokens = int(num_max_rdma_chunked_send_tokens)
        self.num_max_rdma_chunked_recv_tokens = int(num_max_rdma_chunked_recv_tokens)

    def get_nvl_buffer_size_hint(self, hidden_bytes, num_ranks):
        """Bytes of the ranks' rows at DeepEP's default of 4096 tokens per rank: what
        Buffer sizes its op's token limit from (num_nvl_bytes)."""
        return int(hidden_bytes) * int(num_ranks) * 4096

    def get_rdma_buffer_size_hint(self, hidden_bytes, num_ranks):
        return 0  # one node: no RDMA buffer
