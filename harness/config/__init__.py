"""Run composition: the settings schema (run_settings), a suite's definition (suite_spec), Hydra's app (hydra_app)
and the settings help (run_help). May import the engine, machine, results and run.py; never cli/ or suites/."""
