"""The ``litegpu`` command line: inspect, dump, ops, pack and run models."""
