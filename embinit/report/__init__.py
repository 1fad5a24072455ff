"""Table 1 from MLflow alone (`table`: `build_report`, `Report`): which trials make a row (`rows`), the
notes under the table (`notes`), each row against the baseline init (`baseline`), the planned trials that
never finished (`completeness`), Figure 1 and the rows' order (`plots`), the LaTeX form (`latex`), and
numbers as printed (`formatting`), which the reproduction shares. Two inits are compared by
`embinit.comparison`, which the task registry also reads. Reads MLflow through embinit.tracking; nothing
of the sweep."""
