"""python -m dlinspect: the package's version, where it is and which plugins it finds;
python -m dlinspect doctor [...]: the communication self-test under torchrun (dlinspect.doctor)."""
import sys

import dlinspect

if sys.argv[1:2] == ["doctor"]:
    from dlinspect.doctor import main
    sys.exit(main(sys.argv[2:]))

print(f"dlinspect {dlinspect.__version__} ({dlinspect.__file__})")
print("plugin dirs:", ", ".join(dlinspect.plugin_dirs()) or "(none)")
for name in dlinspect.list_features():
    print(" ", name)
