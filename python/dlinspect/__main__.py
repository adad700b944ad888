"""python -m dlinspect: the package's version, where it is and which plugins it finds."""
import dlinspect

print(f"dlinspect {dlinspect.__version__} ({dlinspect.__file__})")
print("plugin dirs:", ", ".join(dlinspect.plugin_dirs()) or "(none)")
for name in dlinspect.list_features():
    print(" ", name)
