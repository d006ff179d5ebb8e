"""The compiled hot paths (docs/compiled.md): which modules mypyc compiles from their own typed
source (:mod:`rmqbuild.modules`), the build (:mod:`rmqbuild.build`, run by ``make``) and the
import hook that loads the compiled modules from the build directory unless RMQ_PURE_PYTHON=1
(:mod:`rmqbuild.hook`). Standard library only at import: the hook runs at every start of the
venv's interpreter."""
