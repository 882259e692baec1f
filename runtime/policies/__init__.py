"""Policies defined in the project (torch modules): the built-in demo and the ACT-size benchmark model.

Importing anything here imports torch; the robot-side serving path never does.
"""
