"""The report's writers, each a function of the report object: results.csv and report.md (`outputs`),
results.parquet (`parquet`), report.html with its plots (`html`, `html_page`, `html_resources`, `plots`),
the Pushgateway summary (`push_summary`). What building and writing share (formatting, the GPU and verdict
sections, the rows of results.csv and results.parquet each chunk of trials has where it is loaded:
`csv_rows`, `parquet_rows`, `arrow_columns`) stays in kaliper.reporter."""
