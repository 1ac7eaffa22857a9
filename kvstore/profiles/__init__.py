"""Memory profiles: what an agent's replies need of the fixed text of its opening (`profile`) and their
calibration from recorded conversations (`calibrate`).
"""
