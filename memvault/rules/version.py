"""memvault's version, where any layer may read it (the package facade re-exports it as ``memvault.__version__``;
reading it from there would make a lower layer depend on the top one)."""

VERSION = "0.1.0"
