"""Durable step attempts fenced by the run's owner. (Built in a later change.)"""
