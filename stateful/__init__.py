"""The conformance suite (``runstore.stateful``). (Built in a later change.)"""
