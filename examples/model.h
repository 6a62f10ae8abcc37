/* SPDX-License-Identifier: BSD-3-Clause */
/* model.h: the trainer's models and the interface a device implements.
 * A model is a stack of fully connected layers: "linear" is the textbook
 * 784->10 classifier, "mlp" puts hidden layers with ReLU in between; the loss
 * is softmax cross-entropy. The parameter list (names, shapes, order) is a
 * pure function of the spec, the same for every device; the values live in
 * the DDP engine's arenas, which the device implementation is given.
 * Not here: data loading, communication, the optimizer. */
#ifndef TRAINER_MODEL_H
#define TRAINER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MODEL_MAX_HIDDEN 32
#define MODEL_MAX_LAYERS (MODEL_MAX_HIDDEN + 1)

typedef enum { MODEL_LINEAR = 0, MODEL_MLP = 1 } model_kind_t;

typedef struct {
    model_kind_t kind;
    int inputs;                    /* 784 for 28x28 images */
    int classes;                   /* 10 */
    int nhidden;                   /* mlp: hidden layers; linear: 0 */
    int hidden[MODEL_MAX_HIDDEN];  /* their widths */
    int batchnorm;                 /* mlp --batchnorm: BatchNorm1d after each hidden
                                      Linear, before its ReLU */
} model_spec_t;

/* Layers and parameters. Layer l maps in(l) -> out(l) features; its
 * parameters are "fc<l+1>.weight" (out, in) and "fc<l+1>.bias" (out,), in
 * that order, layer after layer (linear: "fc.weight", "fc.bias"). Without
 * batchnorm parameter 2l is layer l's weight, 2l+1 its bias. With it, a
 * hidden layer l is followed by "bn<l+1>.weight" (out,) and "bn<l+1>.bias"
 * (out,) (PyTorch's nn.Sequential(Linear, BatchNorm1d, ReLU, ...) under the
 * names of a module with attributes fc1, bn1, fc2, bn2, ...):
 * model_param_index says where each is. */
int model_num_layers(const model_spec_t *s);
int model_layer_in(const model_spec_t *s, int l);
int model_layer_out(const model_spec_t *s, int l);
int model_num_params(const model_spec_t *s);
/* name (room for 32 bytes), ndim and shape of parameter i. */
void model_param_desc(const model_spec_t *s, int i, char *name, int *ndim, int64_t shape[2]);
size_t model_param_count(const model_spec_t *s); /* total floats */
/* Index of layer l's parameter k: MODEL_P_WEIGHT, MODEL_P_BIAS, and with
 * batchnorm on a hidden layer MODEL_P_BN_WEIGHT, MODEL_P_BN_BIAS (-1 where
 * the layer has none). */
enum { MODEL_P_WEIGHT = 0, MODEL_P_BIAS, MODEL_P_BN_WEIGHT, MODEL_P_BN_BIAS };
int model_param_index(const model_spec_t *s, int l, int k);
/* Layer l has a BatchNorm1d (batchnorm on, l a hidden layer). */
int model_layer_bn(const model_spec_t *s, int l);
/* Buffers (batchnorm): per BN layer "bn<l+1>.running_mean" (out,),
 * "bn<l+1>.running_var" (out,), "bn<l+1>.num_batches_tracked" (ndim 0, one
 * float32), BN layer after BN layer; none without batchnorm. */
int model_num_buffers(const model_spec_t *s);
void model_buffer_desc(const model_spec_t *s, int i, char *name, int *ndim, int64_t shape[1]);
size_t model_buffer_count(const model_spec_t *s); /* total floats */
/* PyTorch's initial buffers: running_mean 0, running_var 1, count 0. */
void model_init_buffers(const model_spec_t *s, float *buffers);
/* BatchNorm1d's constants (PyTorch's defaults) */
#define MODEL_BN_MOMENTUM 0.1
#define MODEL_BN_EPS 1e-5
/* Layers [first, end) of a pipeline stage: their parameters are the floats
 * [offset, offset + count) of the model's arena (layers are stored in order). */
size_t model_layers_param_offset(const model_spec_t *s, int first);
size_t model_layers_param_count(const model_spec_t *s, int first, int end);
/* Floating-point operations of layer l per sample in one training step: the
 * forward GEMM, the weight-gradient GEMM and (not for layer 0) the
 * input-gradient GEMM, 2 * in * out each. */
double model_layer_flops(const model_spec_t *s, int l);
/* The contiguous split of the L layers into S stages (1 <= S <= L) that
 * minimizes the largest stage's model_layer_flops; first[s] is stage s's
 * first layer, first[S] = L. Pure. */
void model_partition(const model_spec_t *s, int S, int first[]);
/* "mlp 784-1024-1024-10 (1863690 params)" */
void model_describe(const model_spec_t *s, char *buf, size_t n);

/* PyTorch's nn.Linear initialization, U(-1/sqrt(in), 1/sqrt(in)) for weights
 * and biases, from a generator seeded with seed: params is host memory in
 * registration order (model_param_count floats). Done on rank 0, then
 * broadcast, so only its values matter. */
void model_init_params(const model_spec_t *s, uint64_t seed, float *params);

/* Called by backward as each parameter's gradient becomes complete, last
 * layer first (the trainer passes it on to ddpc_ddp_grad_ready). Returns 0,
 * or non-zero to stop the backward pass. */
typedef int (*model_grad_ready_fn)(void *ctx, int param_index);

typedef struct model model_t; /* a device's activations and workspace */

/* Arithmetic of the forward and backward GEMMs (--precision). Parameters,
 * gradients and optimizer state stay float32 in the engine's arenas (master
 * weights); bf16/fp16 cast the weights and activations for the GEMMs, which
 * accumulate in float32. fp16 needs the dynamic loss scale. CUDA only. */
typedef enum { PRECISION_FP32 = 0, PRECISION_BF16, PRECISION_FP16 } model_precision_t;
const char *model_precision_name(model_precision_t p); /* "fp32", "bf16", "fp16" */

/* Where and how a model runs. */
typedef struct {
    int device;                  /* the GPU ddpc_gpu_rule chose; -1 for the cpu */
    void *stream;                /* cudaStream_t to compute on: the DDP engine's */
    model_precision_t precision;
    const double *loss_scale;    /* device memory: the optimizer's dynamic loss scale,
                                    which multiplies the loss gradient (fp16); NULL: 1 */
    /* A pipeline stage (--pipeline-stages): the model computes layers
     * [stage_first, stage_end) only; stage_end 0 means all layers (the whole
     * model, the default). params and grads then hold the stage's parameters
     * only (model_layers_param_count floats), and grad_ready's indices are the
     * stage's own (0 = its first layer's weight). A stage that does not start
     * at layer 0 takes the previous stage's activations (B, in(first)) as its
     * input x; one that does not end at the last layer keeps its output after
     * the ReLU, computes no loss, and its backward starts from the gradient
     * the caller puts in output_grad. cpu and cuda (fp32, bf16). */
    int stage_first, stage_end;
    /* batchnorm: the engine's buffer arena (model_buffer_count floats, laid
     * out as model_buffer_desc says; the device's memory), and with sync_bn
     * the communicator over which the training statistics are taken
     * (ddpc_comm_t: the data-parallel group, SyncBatchNorm), NULL: each
     * rank's own batch (BatchNorm1d). */
    float *buffers;
    void *bn_comm;
    /* Called by the cpu forward before layer l first reads its parameters,
     * with each one's index (the stage's, as grad_ready's): the trainer
     * passes it on to ddpc_ddp_param_wait, so that a sharded step's gather
     * (DDPC_SHARD_GATHER=forward) overlaps the layers before. NULL: none.
     * The cuda model does not call it (device engines gather at the
     * step's end). */
    model_grad_ready_fn param_use;
    void *param_use_ctx;
    /* Where the backward writes (adds) parameter index's gradient in this
     * micro-step (the index as grad_ready's), asked with param_use_ctx just
     * before each write, in the backward's order: the trainer passes it on
     * to ddpc_ddp_grad, whose pointer under DDPC_SHARD=grads is a bucket
     * stage's, zeroed for the micro-step. NULL from it fails the backward
     * (positive return: the engine's message). NULL: the views of grads. */
    float *(*grad_at)(void *ctx, int index);
} model_place_t;

/* Since the last stats call: what the forwards measured. */
typedef struct {
    double loss_sum;     /* sum over forwards of their mean loss */
    double loss_samples; /* sum over samples of their loss */
    double correct;      /* samples whose argmax is the label */
    double forwards;     /* forward calls */
} model_stats_t;

/* What a device implements (model_cpu.c, model_cuda.c). Host memory goes
 * in through upload and params_io; everything else stays in the device's
 * memory, so that a GPU step never waits for the host. */
typedef struct {
    const char *name; /* "cpu", "cuda" */
    /* Workspace for batches of up to max_batch samples. params and grads are
     * the engine's arenas (the device's memory), laid out as model_param_desc
     * says; the model reads params and accumulates into grads. NULL with a
     * message in err. */
    model_t *(*create)(const model_spec_t *s, const model_place_t *where, int max_batch,
                       float *params, float *grads, char *err, size_t errlen);
    void (*destroy)(model_t *m);
    /* The next batch: x (B, inputs) float32 row-major and labels y (B,) in
     * [0, classes), host memory, valid until the backward of that batch
     * returns (the cpu keeps pointing at x; cuda copies on its copy stream,
     * double-buffered, and returns before the copy is done). 0, or -1.
     * A pipeline stage that does not start at layer 0 passes x = NULL: its
     * input is what the caller wrote into input() (cuda: must be NULL
     * there; cpu: x, when given, is read instead, as the previous stage's
     * activations in host memory). y may be NULL on a stage that is not the
     * last (none is read). */
    int (*upload)(model_t *m, const float *x, const uint8_t *y, int B);
    /* Forward of the last uploaded batch. Its mean loss and hits add to the
     * stats; keeps what backward needs. 0, or -1. */
    int (*forward)(model_t *m);
    /* Backward of the last forward for loss * scale (the trainer passes
     * 1/grad_accum so that accumulated micro-steps average; fp16 multiplies
     * by the loss scale too). Gradients are added to the grads arena (zeroing
     * is the caller's). cb(ctx, p) is called for every parameter once the
     * work completing its gradient is issued, last layer first, bias before
     * weight; a non-zero return stops and is returned. -1: a device error. */
    int (*backward)(model_t *m, double scale, model_grad_ready_fn cb, void *ctx);
    /* The stats since the last call, then zeroed (waits for the device). 0, or -1. */
    int (*stats)(model_t *m, model_stats_t *st);
    /* The whole parameter arena from (to_model = 1) or into host memory
     * (model_param_count floats). Waits for the device. 0, or -1. */
    int (*params_io)(model_t *m, float *host, int to_model);
    /* The message of the last -1 */
    const char *(*error)(model_t *m);
    /* Pipeline stages (NULL where the device has none). The buffers are
     * owned by the model and hold elements of its activation type: float32
     * on the cpu; on cuda the GEMMs' type (float32, bf16 with --precision
     * bf16), in the device's memory (the model's GPU), written and read in
     * order on the compute stream (where.stream), so a transfer issued on
     * that stream after forward (output) or before backward (output_grad)
     * needs no host synchronization. A stage that is not the last: output
     * is its last forward's output after the ReLU (B, out(stage_end-1)),
     * output_grad the buffer (max_batch, out(stage_end-1)) that the caller
     * fills with dloss/doutput before backward. A stage that is not the
     * first: input is the buffer (max_batch, in(stage_first)) that the
     * caller fills with the previous stage's output before upload(m, NULL,
     * ...), read until that batch's backward returns; input_grad is the
     * gradient for the previous stage's output (B, in(stage_first)) after
     * backward (the cpu's has the previous stage's ReLU mask applied, the
     * cuda model's not: there the previous stage applies it, with its
     * bias gradient, as the whole model's unfused path does; either way
     * the previous stage computes the same). Each is valid until the
     * model's next forward or backward. */
    const void *(*output)(model_t *m);
    void *(*output_grad)(model_t *m);
    const void *(*input_grad)(model_t *m);
    void *(*input)(model_t *m);
    /* Training (1, the default) or evaluation (0) mode: batchnorm normalizes
     * with the batch's statistics and updates the running ones (train), or
     * with the running ones (eval), as PyTorch's module.train()/eval().
     * NULL where the device has no batchnorm (it refuses the spec at create). */
    void (*set_train)(model_t *m, int train);
} model_ops_t;

extern const model_ops_t model_cpu_ops;
#ifdef TRAINER_HAVE_CUDA_MODEL
extern const model_ops_t model_cuda_ops; /* model_cuda.c, its kernels in model_cuda_kernels.cu */
int model_cuda_device_count(void);       /* CUDA devices visible, 0 on error */
/* Make device current and create the compute stream (non-blocking) that the
 * DDP engine and the model share; 0, or -1 with the reason in err. */
int model_cuda_open(int device, void **stream, char *err, size_t errlen);
void model_cuda_close(void *stream); /* NULL is a no-op */
/* The input slot (0 or 1) the last upload filled: a CUDA graph of a step
 * reads one slot, so the trainer keeps one graph per slot. */
int model_cuda_upload_slot(const model_t *m);
/* bytes between host memory and the device's (to_device: host -> device),
 * ordered on stream and waited for: the trainer's copies of the engine's
 * arenas (pipeline checkpoints). 0, or -1 with the reason in err. */
int model_cuda_copy(void *stream, void *dst, const void *src, size_t bytes, int to_device,
                    char *err, size_t errlen);
/* CUDA graphs of whole steps on stream: capture (thread-local mode: a call
 * that would synchronize invalidates the capture instead of running), end
 * and instantiate into *exec, launch, free. 0, or -1 with the reason. */
int model_cuda_capture_begin(void *stream, char *err, size_t errlen);
int model_cuda_capture_end(void *stream, void **exec, char *err, size_t errlen);
int model_cuda_graph_launch(void *exec, void *stream, char *err, size_t errlen);
void model_cuda_graph_free(void *exec); /* NULL is a no-op */
#endif

#ifdef __cplusplus
}
#endif

#endif /* TRAINER_MODEL_H */
