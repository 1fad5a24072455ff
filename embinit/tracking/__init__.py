"""MLflow, written and read back: the store and its client (`mlflow_store`), what a tracking URI names
(`store_check`), a SQL store created or upgraded once (`prepare`), a slow tracking server named
(`server_check`); the writers (`trial_run`: a trial's own run, `run_writers`: sweep and analysis runs,
`run_names`, `provenance`); the readers (`run_readers`, through `run_table` on SQL stores) and the frozen
records they return (`records`: trial runs, `run_records`: the others); whether a sweep's driver still
runs (`driver_liveness`). Below the sweep, the report and the reproduction; imports nothing of them."""
