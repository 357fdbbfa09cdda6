"""The report's writers, each a function of the report object: results.csv and report.md (`outputs`),
results.parquet (`parquet`, `arrow_columns`), report.html with its plots (`html`, `html_page`,
`html_resources`, `plots`), the Pushgateway summary (`push_summary`), and the rows the loading processes
make for the first two (`prepared`). What building and writing share (formatting, the GPU and verdict
sections) stays in kaliper.reporter."""
