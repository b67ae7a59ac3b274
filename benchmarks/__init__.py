"""Speed measurements written as JSON and PNG (see README.md here); `common` holds what every benchmark shares."""
