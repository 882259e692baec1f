"""USB servo bus drivers (Feetech STS/SCS, Dynamixel Protocol 2.0) and protocol-faithful simulators."""
