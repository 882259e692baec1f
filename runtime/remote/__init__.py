"""The policy on another machine: the robot's daemon keeps its arm, cameras, recording, teleop and
envelope, and its loop's requests go to a lerobot-runtime serving the policy elsewhere (``[policy]``)."""
