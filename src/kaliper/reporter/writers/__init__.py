"""The report's writers, the top room: results.csv and report.md (`outputs`), results.parquet (`parquet`),
report.html with its plots (`html`, `html_page`, `html_resources`, `plots`), the Pushgateway summary
(`push_summary`). report.md, report.html and the push are functions of the report object
(kaliper.reporter.building); results.csv and results.parquet of the rows loading made with each chunk of
trials (kaliper.reporter.loading.tables.ResultTables)."""
