"""xmfu's harness, installed as `xmfu.harness`: the front door (cli/, suites/, config, hydra_app, run, api) and
the measurement engine beneath it (engine/, machine/, results/), which times any workload the same way and knows
nothing about any one workload."""

__version__ = "0.1.0"  # the one place: pyproject.toml reads it (tool.setuptools.dynamic), `xmfu.__version__` shows it
