"""Result records (versioned schema) and the provenance captured into them."""

from kaliper.results.record import RESULT_SCHEMA, ResultRecord, load_record

__all__ = ["RESULT_SCHEMA", "ResultRecord", "load_record"]
