"""TWIN of g12_background_thread: the thread runs on the caller's current stream and is joined
before returning."""
import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)
        stream = torch.cuda.current_stream(x.device) if x.is_cuda else None

        def work():
            if stream is not None:
                with torch.cuda.stream(stream):  # the current stream is per thread
                    out.copy_(torch.relu(x))
            else:
                out.copy_(torch.relu(x))

        t = threading.Thread(target=work)
        t.start()
        t.join()
        return out
