"""Where requests come from: trace readers and synthetic generators, streamed as RequestChunks."""
from dspark_sim.workload.chunk import RequestChunk, arriving_by, rechunk
from dspark_sim.workload.readers import FORMATS, TraceWarning, count_requests, detect_format, read_trace, write_mooncake
from dspark_sim.workload.synthetic import LengthDist, SyntheticConfig, synthetic_requests

__all__ = ["RequestChunk", "arriving_by", "rechunk", "FORMATS", "TraceWarning", "count_requests", "detect_format",
           "read_trace", "write_mooncake", "LengthDist", "SyntheticConfig", "synthetic_requests"]
