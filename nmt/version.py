"""The installed distribution's version, from its metadata (pyproject.toml is the one place it is
written), so no module imports the package facade for it."""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("nmt")
except PackageNotFoundError:  # a source tree put on sys.path by hand, not installed
    VERSION = "0+unknown"
__version__ = VERSION  # `nmt.__version__`, loaded lazily
