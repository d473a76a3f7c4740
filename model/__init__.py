"""The reference model (``runstore.model``). (Built in a later change.)"""
