# lit configuration of epjit's FileCheck suite. Self-contained (no lit.llvm),
# so it runs with the lit that LLVM 22 ships.
import os

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
