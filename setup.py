"""Only one build step pyproject.toml cannot say: the example vault (``vault/``, the one ``python -m
memvault.demo`` copies) goes into the wheel as ``memvault/example_vault/``, so the demo works from
``pip install memvault`` as it does from a checkout. Everything else is in pyproject.toml."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithExampleVault(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's vault/ itself
            return
        source = HERE / "vault"
        target = Path(self.build_lib) / "memvault" / "example_vault"
        for path in sorted(source.rglob("*")):
            rel = path.relative_to(source)
            if ".memvault" in rel.parts or "__pycache__" in rel.parts:
                continue  # a developer's derived index, never part of the example
            if path.is_symlink():
                raise SystemExit(f"setup.py: {path}: a link in the example vault is refused")
            if path.is_file():
                self.mkpath(str((target / rel).parent))
                self.copy_file(str(path), str(target / rel))


setup(cmdclass={"build_py": BuildWithExampleVault})
