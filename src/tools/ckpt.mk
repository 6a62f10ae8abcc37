# src/tools/ckpt.mk: ddpc-ckpt, the checkpoint inspection tool (installed), and its test.
