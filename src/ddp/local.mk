# src/ddp: the DDP engine (registry, bucket plan, reducer) and the optimizers.
include_HEADERS += include/ddpc_ddp.h
libddpc_la_SOURCES += src/ddp/ddp_internal.h src/ddp/ddp.c src/ddp/reducer.c src/ddp/optim.c
