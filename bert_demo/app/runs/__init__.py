"""The app's runs: the one training slot and its line, a run followed in a process of its own or in a ZeroGPU call,
the folders runs write and the disk they share, and how long a run takes here (its pace and the estimates made from it).
"""
