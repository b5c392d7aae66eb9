"""PyFlink (TableEnvironment SQL) jobs over the typed topic."""
