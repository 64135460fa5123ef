"""Local fakes of the cloud services the backends talk to. Test code only."""
