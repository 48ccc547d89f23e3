"""A package's public names imported on first use (PEP 562), so importing the package starts nothing heavy."""
import importlib
import sys


def lazy_getattr(package, modules):
    """A module ``__getattr__`` for ``package`` that imports ``modules[name]`` on the first use of ``name``.

    Example:
    >>> from bert4long.lazy_names import lazy_getattr
    >>> getattr_ = lazy_getattr("json", {"JSONDecoder": "json.decoder"})
    >>> getattr_("JSONDecoder").__name__
    'JSONDecoder'
    """
    def __getattr__(name):
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(modules[name]), name)
        setattr(sys.modules[package], name, value)   # later uses find it without this function
        return value

    return __getattr__
