# lit configuration of epjit's FileCheck suite. Self-contained (no lit.llvm),
# so it runs with the lit that LLVM 22 ships.
import os
import sys

import lit.formats

config.name = "epjit"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.epjit_obj_root, "tests", "lit")

# epjit's tools first, then LLVM 22's (FileCheck, not, llvm-objdump).
config.environment["PATH"] = os.pathsep.join(
    [config.epjit_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")]
)
config.substitutions.append(("%epjit_src", config.epjit_src_root))
config.substitutions.append(("%python", sys.executable))

# The EP kernels' parameters at DeepSeek-V3 EP8 (hidden 7168, top-8, 256 experts,
# bf16 combine, scatter with fp8 blockwise quant), in blocks of 16 warps as the
# op builds them. The op's limits (max_tokens, capacity) are runtime parameters
# that the op leaves unbound, so these leave them unbound too: the checks see
# the code the op runs. %{ep_limits} binds them (128 tokens per rank, capacity
# 1024), as EPJIT_SPECIALIZE_LIMITS=1 does.
config.substitutions.append(("%{ep}", " ".join("--set " + p for p in [
    "token_words=1792", "scale_bytes=0", "hidden=7168", "topk=8", "experts_per_rank=32", "world=8", "gpu_per_node=8",
    "combine_mode=scatter", "quant=fp8_blockwise", "combine_elem=bf16",
    "warps_per_block=16"])))
config.substitutions.append(("%{ep_limits}", "--set max_tokens=128 --set capacity=1024 --set forward_route_rows=0"))

# The same shape with the kernels %{ep} leaves out of its module: gather
# combine and the standard-MoE layout (plain bf16).
config.substitutions.append(("%{ep_gather}", " ".join("--set " + p for p in [
    "token_words=3584", "scale_bytes=0", "hidden=7168", "topk=8", "experts_per_rank=32", "world=8", "gpu_per_node=8",
    "combine_mode=gather", "quant=none", "combine_elem=bf16", "std_moe=true",
    "warps_per_block=16"])))

# The same shape as two nodes of four ranks, plain scatter (quant is intranode
# only): the internode (v2_ll) path.
config.substitutions.append(("%{ep_internode}", " ".join("--set " + p for p in [
    "token_words=1792", "scale_bytes=0", "hidden=7168", "topk=8", "experts_per_rank=32", "world=8", "gpu_per_node=4",
    "combine_mode=scatter", "quant=none", "combine_elem=bf16",
    "warps_per_block=16"])))

# The low-latency combine's shape: EP2 decode (top-8 over 2 ranks, at most 128
# tokens per rank), plain gather.
config.substitutions.append(("%{ep_low_latency}", " ".join("--set " + p for p in [
    "token_words=3584", "scale_bytes=0", "hidden=7168", "topk=8", "experts_per_rank=128", "world=2", "gpu_per_node=2",
    "combine_mode=gather", "quant=none", "combine_elem=bf16", "low_latency=true",
    "warps_per_block=16"])))
