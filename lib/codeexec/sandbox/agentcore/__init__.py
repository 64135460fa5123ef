"""The `agentcore` backend: AWS Bedrock AgentCore Code Interpreter sessions (see sandboxes.py)."""

from .sandboxes import AgentCoreConfig, AgentCoreSandboxes

__all__ = ["AgentCoreConfig", "AgentCoreSandboxes"]
