"""Speed measurements written as JSON and PNG (docs/benchmarks.md describes each); `common` holds what every benchmark shares."""
