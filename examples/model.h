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

#define MODEL_MAX_HIDDEN 8
#define MODEL_MAX_LAYERS (MODEL_MAX_HIDDEN + 1)

typedef enum { MODEL_LINEAR = 0, MODEL_MLP = 1 } model_kind_t;

typedef struct {
    model_kind_t kind;
    int inputs;                    /* 784 for 28x28 images */
    int classes;                   /* 10 */
    int nhidden;                   /* mlp: hidden layers; linear: 0 */
    int hidden[MODEL_MAX_HIDDEN];  /* their widths */
} model_spec_t;

/* Layers and parameters. Layer l maps in(l) -> out(l) features; its
 * parameters are "fc<l+1>.weight" (out, in) and "fc<l+1>.bias" (out,), in
 * that order, layer after layer (linear: "fc.weight", "fc.bias"). Parameter
 * 2l is layer l's weight, 2l+1 its bias. */
int model_num_layers(const model_spec_t *s);
int model_layer_in(const model_spec_t *s, int l);
int model_layer_out(const model_spec_t *s, int l);
int model_num_params(const model_spec_t *s);
/* name (room for 32 bytes), ndim and shape of parameter i. */
void model_param_desc(const model_spec_t *s, int i, char *name, int *ndim, int64_t shape[2]);
size_t model_param_count(const model_spec_t *s); /* total floats */
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

/* What a device implements (model_cpu.c; a CUDA model later). Memory given
 * to a device (arenas, batches) is the device's memory; inputs x are
 * (B, inputs) float32 row-major, labels y are (B,) in [0, classes). */
typedef struct {
    const char *name; /* "cpu" */
    /* Workspace for batches of up to max_batch samples on device `device`
     * (the GPU index ddpc_gpu_rule chose; -1 for the cpu). params and grads are
     * the engine's arenas, laid out as model_param_desc says; the model reads
     * params and accumulates into grads. NULL with a message in err. */
    model_t *(*create)(const model_spec_t *s, int device, int max_batch, float *params,
                       float *grads, char *err, size_t errlen);
    void (*destroy)(model_t *m);
    /* Forward B samples; returns the mean loss over them and sets *correct
     * (may be NULL) to the number whose argmax equals the label. Keeps what
     * backward needs. */
    double (*forward)(model_t *m, const float *x, const int *y, int B, int *correct);
    /* Backward of the last forward for loss * scale (the trainer passes
     * 1/grad_accum so that accumulated micro-steps average). Gradients are
     * added to the grads arena (zeroing is the caller's). cb(ctx, p) is called
     * for every parameter once its gradient is complete, last layer first;
     * a non-zero return stops and is returned. */
    int (*backward)(model_t *m, double scale, model_grad_ready_fn cb, void *ctx);
} model_ops_t;

extern const model_ops_t model_cpu_ops;
#ifdef TRAINER_HAVE_CUDA_MODEL
extern const model_ops_t model_cuda_ops; /* model_cuda.cu, with the GPU work */
int model_cuda_device_count(void);       /* CUDA devices visible, 0 on error */
#endif

#endif /* TRAINER_MODEL_H */
