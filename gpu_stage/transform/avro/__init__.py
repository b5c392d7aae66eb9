"""Avro encoding of typed rows: an encoder generated once per schema, then columns in bulk."""
