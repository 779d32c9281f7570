"""Tests of tools/profile_kernels.py that need neither a GPU nor torch (stdlib unittest).

Run from the repository root: python3 -m unittest discover -s tools/tests
"""

import importlib.util
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent
SCRIPT = TOOLS / "profile_kernels.py"
sys.path.insert(0, str(TOOLS))

import profile_kernels as pk  # noqa: E402

HEADER = "gpu,dtype,kernel,pass,shape,flops,bytes,time_us,source"
ATTN = "attention:batch=1;heads=16;kv_heads=4;seq_q=4096;seq_kv=4096;head_dim=128;" \
       "causal=true;flash=true"

# One row of every kind of kernel fleetsim emits for a Llama-like layer with SwiGLU and MoE
# (TP 2 with SP, bf16, flash), plus an imported row. Numbers follow sim/src/workload/layer.rs.
GOOD = textwrap.dedent(f"""\
    # written by fleetsim workload --export kernels

    {HEADER}
    H100-SXM,bf16,embedding,fwd,elementwise:elements=16777216,67108864,67108864,20.1,model
    H100-SXM,bf16,input_norm,fwd,elementwise:elements=8388608,33554432,16777216,5.0,model
    H100-SXM,bf16,input_norm,bwd,elementwise:elements=8388608,67108864,33554432,10.0,model
    H100-SXM,bf16,qkv_proj,fwd,gemm:m=4096;n=3072;k=4096;batch=1,103079215104,83886080,120.5,model
    H100-SXM,bf16,qkv_proj,dgrad,gemm:m=4096;n=4096;k=3072;batch=1,103079215104,83886080,120.5,model
    H100-SXM,bf16,qkv_proj,wgrad,gemm:m=4096;n=3072;k=4096;batch=1,103079215104,83886080,120.5,model
    H100-SXM,bf16,rope,fwd,elementwise:elements=10485760,83886080,41943040,12.5,model
    H100-SXM,bf16,core_attention,fwd,{ATTN},274877906944,67108864,600.0,model
    H100-SXM,bf16,core_attention,bwd,{ATTN},549755813888,134217728,1500.0,model
    H100-SXM,bf16,out_proj,fwd,gemm:m=4096;n=4096;k=2048;batch=1,68719476736,58720256,80.0,model
    H100-SXM,bf16,attn_bias_dropout_add,fwd,elementwise:elements=8388608,33554432,50331648,15.0,model
    H100-SXM,bf16,attn_bias_dropout_add,bwd,elementwise:elements=8388608,67108864,100663296,30.0,model
    H100-SXM,bf16,pre_mlp_norm,fwd,elementwise:elements=8388608,33554432,16777216,5.0,model
    H100-SXM,bf16,mlp_up,fwd,gemm:m=4096;n=14336;k=4096;batch=1,481036337152,184549376,500.0,model
    H100-SXM,bf16,mlp_activation,fwd,elementwise:elements=29360128,117440512,176160768,52.6,model
    H100-SXM,bf16,mlp_activation,bwd,elementwise:elements=29360128,234881024,352321536,105.2,model
    H100-SXM,bf16,mlp_down,fwd,gemm:m=4096;n=4096;k=7168;batch=1,240518168576,109051904,250.0,model
    H100-SXM,bf16,mlp_bias_dropout_add,fwd,elementwise:elements=8388608,33554432,50331648,15.0,model
    H100-SXM,bf16,router,fwd,gemm:m=2048;n=8;k=4096;batch=1,134217728,16875520,5.0,model
    H100-SXM,bf16,moe_permute,fwd,elementwise:elements=16777216,67108864,67108864,20.0,model
    H100-SXM,bf16,moe_unpermute,bwd,elementwise:elements=16777216,134217728,134217728,40.0,model
    H100-SXM,bf16,expert_up,fwd,gemm:m=2048;n=14336;k=4096;batch=4,962072674304,369098752,1000.0,model
    H100-SXM,bf16,expert_activation,fwd,elementwise:elements=58720256,234881024,352321536,105.0,model
    H100-SXM,bf16,expert_down,wgrad,gemm:m=7168;n=4096;k=2048;batch=4,481036337152,0,500.0,model
    H100-SXM,bf16,shared_expert_up,fwd,gemm:m=4096;n=14336;k=4096;batch=1,481036337152,0,500.0,model
    H100-SXM,bf16,shared_expert_activation,fwd,elementwise:elements=29360128,0,176160768,52.6,model
    H100-SXM,bf16,shared_expert_down,dgrad,gemm:m=4096;n=7168;k=4096;batch=1,240518168576,0,250.0,model
    H100-SXM,bf16,final_norm,fwd,elementwise:elements=8388608,33554432,16777216,5.0,model
    H100-SXM,bf16,logits,fwd,gemm:m=4096;n=64128;k=4096;batch=1,2151778615296,0,2200.0,model
    H100-SXM,bf16,cross_entropy,fwd,elementwise:elements=262668288,1050673152,1576009728,470.0,model
    H100-SXM,bf16,embedding,wgrad,elementwise:elements=16777216,67108864,100663296,30.0,model
    H100-SXM,bf16,grad_norm,fwd,elementwise:elements=1000000000,2000000000,4000000000,1200.0,model
    H100-SXM,bf16,optimizer_step,fwd,elementwise:elements=1000000000,12000000000,30000000000,9000.0,model
    H100-SXM,bf16,optimizer_step,bwd,elementwise:elements=1000000000,0,8000000000,2400.0,model
    H100-SXM,bf16,imported,fwd,fixed:ns=123456,0,0,123.456,model
""")
GOOD_PROFILED = 34  # rows above, less the imported one


def write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def run_tool(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, check=False)


def row(kernel: str = "qkv_proj", pass_: str = "fwd", shape: str = "gemm:m=4;n=8;k=16;batch=1",
        dtype: str = "bf16", gpu: str = "H100-SXM", flops: int = 1024, nbytes: int = 512,
        time_us: float = 1.5) -> pk.Row:
    parsed = shape if kernel == "imported" else pk.parse_shape(shape)
    return pk.Row(gpu, dtype, kernel, pass_, parsed, flops, nbytes, time_us, "model")


class ShapeTests(unittest.TestCase):
    def test_gemm(self):
        self.assertEqual(pk.parse_shape("gemm:m=4096;n=3072;k=4096;batch=1"),
                         pk.Gemm(4096, 3072, 4096, 1))

    def test_attention(self):
        s = pk.parse_shape("attention:batch=2;heads=32;kv_heads=8;seq_q=2048;seq_kv=4096;"
                           "head_dim=128;causal=true;flash=false")
        self.assertEqual(s, pk.Attention(2, 32, 8, 2048, 4096, 128, True, False))

    def test_elementwise(self):
        self.assertEqual(pk.parse_shape("elementwise:elements=7"), pk.Elementwise(7))

    def test_keys_in_any_order_print_canonically(self):
        s = pk.parse_shape("gemm:batch=4;k=3;n=2;m=1")
        self.assertEqual(pk.shape_text(s), "gemm:m=1;n=2;k=3;batch=4")

    def test_canonical_text_round_trips(self):
        for text in ("gemm:m=1;n=2;k=3;batch=4", ATTN, "elementwise:elements=9"):
            self.assertEqual(pk.shape_text(pk.parse_shape(text)), text)

    def test_attention_dropout_is_optional_and_written_only_when_set(self):
        # fleetsim's shape_key writes `;dropout=true` only for kernels with dropout.
        self.assertFalse(pk.parse_shape(ATTN).dropout)
        with_dropout = pk.parse_shape(ATTN + ";dropout=true")
        self.assertTrue(with_dropout.dropout)
        self.assertEqual(pk.shape_text(with_dropout), ATTN + ";dropout=true")
        self.assertEqual(pk.shape_text(pk.parse_shape(ATTN + ";dropout=false")), ATTN)

    def test_a_chain_of_small_ops_is_timed_as_that_many_launches(self):
        # fleetsim writes `;kernels=K` only above 1 (an unfused MoE router or permutation).
        chain = pk.parse_shape("elementwise:elements=9;kernels=47")
        self.assertEqual(chain, pk.Elementwise(9, 47))
        self.assertEqual(pk.shape_text(chain), "elementwise:elements=9;kernels=47")
        self.assertEqual(pk.shape_text(pk.parse_shape("elementwise:elements=9;kernels=1")),
                         "elementwise:elements=9")
        plan = pk.plan_row(row("router_topk", "fwd", "elementwise:elements=9;kernels=47",
                               nbytes=47 * 6 * 1000))
        self.assertEqual((plan.op, plan.launches, plan.numel), ("add", 47, 47 * 1000))
        self.assertIn("47 x torch.add", plan.describe())

    def test_malformed(self):
        bad = {
            "conv:x=1": "unknown shape kind",
            "gemm": "unknown shape kind",
            "gemm:m=1;n=2;k=3": "missing batch",
            "gemm:m=1;n=2;k=3;batch=1;z=4": "bad field",
            "gemm:m=1;m=1;n=2;k=3;batch=1": "given twice",
            "gemm:m=x;n=2;k=3;batch=1": "not a positive integer",
            "gemm:m=-1;n=2;k=3;batch=1": "not a positive integer",
            "gemm:m=0;n=2;k=3;batch=1": "not a positive integer",
            "gemm:m;n=2;k=3;batch=1": "bad field",
            "elementwise:elements=1.5": "not a positive integer",
            ATTN.replace("causal=true", "causal=yes"): "causal=yes",
            ATTN.replace("kv_heads=4", "kv_heads=5"): "not a multiple of kv_heads",
        }
        for text, message in bad.items():
            with self.subTest(text=text), self.assertRaises(pk.RowError) as cm:
                pk.parse_shape(text)
            self.assertIn(message, str(cm.exception))
            self.assertIn("expected", str(cm.exception))


class TableTests(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_reads_every_kind_and_skips_comments(self):
        rows = pk.read_table(write(self.tmp.name, "t.csv", GOOD))
        self.assertEqual(len(rows), GOOD_PROFILED + 1)
        self.assertEqual(rows[0].line, 4)
        kinds = {type(r.shape) for r in rows}
        self.assertEqual(kinds, {pk.Gemm, pk.Attention, pk.Elementwise, str})
        imported = [r for r in rows if r.kernel == "imported"]
        self.assertEqual(imported[0].shape, "fixed:ns=123456")

    def test_round_trip(self):
        rows = pk.read_table(write(self.tmp.name, "t.csv", GOOD))
        out = os.path.join(self.tmp.name, "out.csv")
        pk.write_table(out, rows)
        again = pk.read_table(out)
        strip = [(r.key(), r.flops, r.bytes, r.time_us, r.source) for r in rows]
        self.assertEqual(strip, [(r.key(), r.flops, r.bytes, r.time_us, r.source) for r in again])

    def test_writer_header_and_format(self):
        out = os.path.join(self.tmp.name, "out.csv")
        pk.write_table(out, [row(time_us=12.3456789), row(pass_="dgrad", time_us=1e-5)])
        lines = Path(out).read_text(encoding="utf-8").splitlines()
        self.assertEqual(lines[0], HEADER)
        self.assertEqual(lines[1],
                         "H100-SXM,bf16,qkv_proj,fwd,gemm:m=4;n=8;k=16;batch=1,1024,512,12.346,model")
        self.assertEqual(lines[2].split(",")[7], "1e-05")

    def test_format_time(self):
        self.assertEqual(pk.format_time(12.5), "12.500")
        self.assertEqual(pk.format_time(1234567.8912), "1234567.891")
        self.assertEqual(pk.format_time(0.0004), "0.0004")
        for bad in (0.0, -1.0, float("nan"), float("inf")):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                pk.format_time(bad)

    def test_writer_quotes_what_needs_it_and_the_reader_reads_it_back(self):
        out = os.path.join(self.tmp.name, "out.csv")
        r = pk.Row("H100-SXM", "bf16", "rope", "fwd", pk.Elementwise(4), 0, 6, 1.0,
                   'NVIDIA H100, "80GB"  HBM3')
        pk.write_table(out, [r])
        text = Path(out).read_text(encoding="utf-8")
        self.assertIn(',"NVIDIA H100, ""80GB""  HBM3"\n', text)
        self.assertEqual(pk.read_table(out)[0].source, 'NVIDIA H100, "80GB"  HBM3')

    def test_quoted_fields_read_as_standard_csv(self):
        good = GOOD.splitlines()
        quoted = good[:-1] + [good[-1].replace(",model", ',"model, measured"')]
        rows = pk.read_table(write(self.tmp.name, "q.csv", "\n".join(quoted) + "\n"))
        self.assertEqual(rows[-1].source.strip(), "model, measured")

    def test_crlf_and_bom(self):
        text = "\ufeff" + GOOD.replace("\n", "\r\n")
        rows = pk.read_table(write(self.tmp.name, "t.csv", text))
        self.assertEqual(len(rows), GOOD_PROFILED + 1)

    def test_distinct_measures_each_kernel_once(self):
        a100 = "\n".join(line.replace("H100-SXM,", "A100-SXM-80GB,", 1)
                         for line in GOOD.splitlines() if line.startswith("H100-SXM,"))
        rows = pk.read_table(write(self.tmp.name, "t.csv", GOOD + a100 + "\n"))
        todo, imported = pk.distinct(rows)
        self.assertEqual(len(todo), GOOD_PROFILED)
        self.assertEqual(len(imported), 2)
        self.assertTrue(all(r.gpu == "H100-SXM" for r in todo), "keeps the first occurrence")
        self.assertEqual(len({r.measure_key() for r in todo}), GOOD_PROFILED)


class GpuNameTests(unittest.TestCase):
    def test_known_names(self):
        names = {
            "NVIDIA H100 80GB HBM3": "H100-SXM",
            "NVIDIA H100 PCIe": "H100-PCIe",
            "NVIDIA H200": "H200-SXM",
            "NVIDIA H800": "H800",
            "NVIDIA H20": "H20",
            "NVIDIA A100-SXM4-80GB": "A100-SXM-80GB",
            "NVIDIA A100-SXM4-40GB": "A100-SXM-40GB",
            "NVIDIA A800-SXM4-80GB": "A800",
            "NVIDIA B200": "B200",
            "NVIDIA GB200": "GB200",
            "Tesla V100-SXM2-32GB": "V100",
            "AMD Instinct MI300X": "MI300X",
        }
        for device, canonical in names.items():
            with self.subTest(device=device):
                self.assertEqual(pk.canonical_gpu(device), canonical)
                self.assertIn(canonical, pk.KNOWN_GPUS)

    def test_unknown_names_ask_for_gpu(self):
        for device in ("NVIDIA GeForce RTX 4090", "NVIDIA H100 NVL", "NVIDIA A100 80GB PCIe",
                       "NVIDIA GH200 480GB", "NVIDIA H200 NVL", ""):
            with self.subTest(device=device), self.assertRaises(pk.InputError) as cm:
                pk.canonical_gpu(device)
            self.assertIn("--gpu", str(cm.exception))


class PlanTests(unittest.TestCase):
    def test_gemm_layouts(self):
        cases = {
            ("fwd", 1): "torch.nn.functional.linear(x[4,16], w[8,16]) bfloat16",
            ("dgrad", 1): "torch.mm(dy[4,16], w[16,8]) bfloat16",
            ("wgrad", 1): "torch.mm(a[16,4].t(), b[16,8]) bfloat16",
            ("fwd", 3): "torch.bmm(x[3,4,16], w[3,8,16].transpose(1,2)) bfloat16",
            ("dgrad", 3): "torch.bmm(dy[3,4,16], w[3,16,8]) bfloat16",
            ("wgrad", 3): "torch.bmm(a[3,16,4].transpose(1,2), b[3,16,8]) bfloat16",
        }
        for (pass_, batch), expected in cases.items():
            with self.subTest(pass_=pass_, batch=batch):
                r = row(pass_=pass_, shape=f"gemm:m=4;n=8;k=16;batch={batch}")
                self.assertEqual(pk.plan_row(r).describe(), expected)

    def test_tf32_and_fp32(self):
        self.assertIn("TF32 on", pk.plan_row(row(dtype="tf32")).describe())
        self.assertIn("TF32 off", pk.plan_row(row(dtype="fp32")).describe())

    def test_fp8_pads_to_16(self):
        p = pk.plan_row(row(dtype="fp8", shape="gemm:m=250;n=100;k=256;batch=2"))
        self.assertEqual((p.m, p.n, p.k, p.batch, p.padded), (256, 112, 256, 2, True))
        self.assertIn("_scaled_mm", p.describe())
        self.assertFalse(pk.plan_row(row(dtype="fp8", shape="gemm:m=16;n=32;k=48;batch=1")).padded)

    def test_fp8_fast_accumulation_modes(self):
        def fast(pass_, mode, dtype="fp8"):
            plan = pk.plan_row(row(pass_=pass_, dtype=dtype), "flash", mode)
            return plan.fast_accum, "use_fast_accum=True" in plan.describe()
        for pass_ in ("fwd", "dgrad", "wgrad"):
            with self.subTest(pass_=pass_):
                self.assertEqual(fast(pass_, "off"), (False, False))
                self.assertEqual(fast(pass_, "on"), (True, True))
                # Transformer Engine on Hopper: fast accumulation in the forward GEMM only.
                self.assertEqual(fast(pass_, "fprop"), (pass_ == "fwd",) * 2)
                self.assertEqual(fast(pass_, "on", "bf16"), (False, False))
        self.assertEqual(pk.parse_args(["--template", "t.csv"]).fp8_fast_accum, "off")
        self.assertEqual(
            pk.parse_args(["--template", "t.csv", "--fp8-fast-accum", "fprop"]).fp8_fast_accum,
            "fprop")

    def test_attention_chunks(self):
        full = pk.Attention(1, 8, 8, 4096, 4096, 128, True, True)
        self.assertEqual(pk.attention_chunks(full), [pk.Chunk(0, 4096, 4096, "causal")])
        # CP 2 with gathered KV: rank 0's early half over its keys, late half over all keys.
        cp = pk.Attention(1, 8, 8, 2048, 4096, 128, True, True)
        self.assertEqual(pk.attention_chunks(cp), [pk.Chunk(0, 1024, 1024, "causal"),
                                                   pk.Chunk(1024, 2048, 4096, "lower_right")])
        ring = pk.Attention(1, 8, 8, 2048, 2048, 128, False, True)
        self.assertEqual(pk.attention_chunks(ring), [pk.Chunk(0, 2048, 2048, "none")])
        unfused = pk.Attention(1, 8, 8, 2048, 4096, 128, True, False)
        self.assertEqual(pk.attention_chunks(unfused),
                         [pk.Chunk(0, 2048, 4096, "lower_right")])

    def test_cudnn_chunks_split_bottom_right_masks_into_rectangle_and_square(self):
        # cuDNN through SDPA has no bottom-right mask: the late half's 1024 queries over 4096
        # keys become a full 1024 x 3072 rectangle and a causal 1024 x 1024 square on the
        # last keys, the same work.
        cp = pk.Attention(1, 8, 8, 2048, 4096, 128, True, True)
        chunks = pk.AttentionPlan(cp, False, "bf16", "cudnn").chunks
        self.assertEqual(chunks, [pk.Chunk(0, 1024, 1024, "causal"),
                                  pk.Chunk(1024, 2048, 3072, "none"),
                                  pk.Chunk(1024, 2048, 1024, "causal", 3072)])
        # The flash backend keeps the bottom-right mask.
        flash = pk.AttentionPlan(cp, False, "bf16", "flash").chunks
        self.assertEqual(flash, pk.attention_chunks(cp))
        self.assertIn("cudnn backend", pk.AttentionPlan(cp, True, "bf16", "cudnn").describe())

    def test_megatron_backend_is_cudnn_from_hopper_on(self):
        self.assertEqual(pk.megatron_attention_backend((9, 0)), "cudnn")
        self.assertEqual(pk.megatron_attention_backend((10, 0)), "cudnn")
        self.assertEqual(pk.megatron_attention_backend((8, 0)), "flash")
        self.assertEqual(pk.megatron_attention_backend(None), "flash")

    def test_attention_descriptions(self):
        fwd = pk.plan_row(row("core_attention", "fwd", ATTN)).describe()
        self.assertIn("scaled_dot_product_attention(q[1,16,4096,128], k/v[1,4,4096,128], "
                      "is_causal=True, enable_gqa=True)", fwd)
        bwd = pk.plan_row(row("core_attention", "bwd", ATTN)).describe()
        self.assertTrue(bwd.startswith("backward of "))
        self.assertIn("autograd.grad", bwd)
        unfused = pk.plan_row(row("core_attention", "fwd", ATTN.replace("flash=true",
                                                                       "flash=false")))
        self.assertIn("baddbmm(q[16,4096,128], k[16,128,4096])", unfused.describe())
        self.assertIn("dropout(p=0.1)", unfused.describe())

    def test_fp8_attention_runs_in_bf16(self):
        self.assertIn("bfloat16", pk.plan_row(row("core_attention", "fwd", ATTN, "fp8")).describe())

    def test_elementwise_sizes_from_bytes(self):
        # (kernel, pass, dtype, bytes) -> (op, tensor elements)
        cases = {
            ("input_norm", "fwd", "bf16", 2 * 2048 * 4096 * 2): ("layer_norm", 2048 * 4096),
            ("final_norm", "bwd", "bf16", 4 * 2048 * 4096 * 2): ("layer_norm", 2048 * 4096),
            ("pre_mlp_norm", "fwd", "fp32", 2 * 4096 * 4): ("layer_norm", 4096),
            # GELU: read f, write f; SwiGLU: read 2f, write f -> one tensor of 1.5 f.
            ("mlp_activation", "fwd", "bf16", 2 * 1000 * 2): ("gelu", 1000),
            ("expert_activation", "fwd", "bf16", 3 * 1000 * 2): ("gelu", 1500),
            ("shared_expert_activation", "bwd", "bf16", 6 * 1000 * 2): ("gelu", 1500),
            ("attn_bias_dropout_add", "fwd", "bf16", 3 * 1000 * 2): ("dropout_add", 1000),
            ("mlp_bias_dropout_add", "bwd", "fp8", 6 * 1000 * 2): ("dropout_add", 1000),
            ("rope", "fwd", "bf16", 3 * 1000 * 2): ("add", 1000),
            ("embedding", "wgrad", "bf16", 3 * 1000 * 2): ("add", 1000),
            ("cross_entropy", "bwd", "fp32", 3 * 1000 * 4): ("add", 1000),
            ("grad_norm", "fwd", "bf16", 0): ("add", 1),
        }
        for (kernel, pass_, dtype, nbytes), (op, numel) in cases.items():
            with self.subTest(kernel=kernel, pass_=pass_):
                p = pk.plan_row(row(kernel, pass_, "elementwise:elements=1", dtype,
                                    nbytes=nbytes))
                self.assertEqual((p.op, p.numel), (op, numel))
                self.assertEqual(p.backward, op != "add" and pass_ != "fwd")

    def test_big_proxy_runs_in_chunks(self):
        n = 2 * pk.PROXY_CHUNK + 5
        self.assertEqual(pk.proxy_calls(n), [(pk.PROXY_CHUNK, 2), (5, 1)])
        self.assertEqual(pk.proxy_calls(pk.PROXY_CHUNK), [(pk.PROXY_CHUNK, 1)])
        self.assertEqual(pk.proxy_calls(7), [(7, 1)])
        p = pk.plan_row(row("optimizer_step", "fwd", "elementwise:elements=1", nbytes=6 * n))
        self.assertIn(f"2 x torch.add(a[{pk.PROXY_CHUNK}]", p.describe())


class CliTests(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        # A torch that fails loudly: proves the paths under test never import it.
        fake = os.path.join(self.tmp.name, "fake_torch")
        os.makedirs(os.path.join(fake, "torch"))
        write(fake, "torch/__init__.py", "raise ImportError('torch imported by a CPU test')\n")
        self.env = dict(os.environ, PYTHONPATH=fake)

    def assert_one_line_error(self, result, where: str, *needles: str):
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertTrue(lines[0].startswith(f"error: {where}"), lines[0])
        for needle in needles:
            self.assertIn(needle, lines[0])
        self.assertEqual(result.stdout, "")

    def test_plan_lists_profiled_rows_and_skips_imported(self):
        path = write(self.tmp.name, "t.csv", GOOD)
        result = run_tool("--template", path, "--plan", env=self.env)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(len(lines), GOOD_PROFILED)
        self.assertTrue(lines[0].startswith("bf16 embedding fwd elementwise:elements=16777216: "))
        self.assertFalse(any(" imported " in line for line in lines))
        self.assertIn(f"{path}:38: skipping kernel imported", result.stderr)
        self.assertNotIn("Traceback", result.stderr)

    def test_plan_deduplicates_gpus(self):
        text = textwrap.dedent(f"""\
            {HEADER}
            H100-SXM,bf16,qkv_proj,fwd,gemm:m=4;n=8;k=16;batch=1,1024,512,1.0,model
            A100-SXM-80GB,bf16,qkv_proj,fwd,gemm:m=4;n=8;k=16;batch=1,1024,512,2.0,model
            A100-SXM-80GB,fp16,qkv_proj,fwd,gemm:m=4;n=8;k=16;batch=1,1024,512,2.0,model
            A100-SXM-80GB,bf16,qkv_proj,fwd,gemm:batch=1;k=16;n=8;m=4,1024,512,2.0,model
            """)
        # The last row repeats the third's key with its shape keys reordered.
        result = run_tool("--template", write(self.tmp.name, "t.csv", text), "--plan",
                          env=self.env)
        self.assertEqual(result.returncode, 1)
        self.assertIn(":5: duplicate key", result.stderr)
        result = run_tool("--template", write(self.tmp.name, "t.csv", text.rsplit("\n", 2)[0]),
                          "--plan", env=self.env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(result.stdout.splitlines()), 2)

    def test_bad_inputs_give_one_line_with_file_and_line(self):
        good = "H100-SXM,bf16,qkv_proj,fwd,gemm:m=4;n=8;k=16;batch=1,1024,512,1.5,model"
        cases = {
            "bad header": (HEADER.replace("time_us", "time") + "\n" + good, 1, "header"),
            "unknown kernel": (good.replace("qkv_proj", "conv2d"), 2, "unknown kernel 'conv2d'"),
            "unknown pass": (good.replace(",fwd,", ",forward,"), 2, "unknown pass 'forward'"),
            "unknown dtype": (good.replace("bf16", "int8"), 2, "unknown dtype 'int8'"),
            "malformed shape": (good.replace("k=16;", ""), 2, "missing k"),
            "unknown shape kind": (good.replace("gemm:", "matmul:"), 2, "unknown shape kind"),
            "zero time": (good.replace(",1.5,", ",0,"), 2, "not positive"),
            "negative time": (good.replace(",1.5,", ",-2.5,"), 2, "not positive"),
            "nan time": (good.replace(",1.5,", ",nan,"), 2, "not a number"),
            "huge time": (good.replace(",1.5,", ",1e999,"), 2, "not positive"),
            "duplicate key": (good + "\n# again\n" + good, 4, "duplicate key"),
            "field count": (good + ",extra", 2, "10 fields"),
            "unterminated quote": (good.replace("model", '"model'), 2, "expected standard CSV"),
            "negative bytes": (good.replace(",512,", ",-512,"), 2, "bytes '-512'"),
            "fractional flops": (good.replace(",1024,", ",1.5e3,"), 2, "flops '1.5e3'"),
            "gemm bwd": (good.replace(",fwd,", ",bwd,"), 2, "pass bwd does not apply"),
            "attention dgrad": (f"H100-SXM,bf16,core_attention,dgrad,{ATTN},1,1,1.0,model", 2,
                                "pass dgrad does not apply"),
        }
        for name, (body, line, needle) in cases.items():
            with self.subTest(name):
                text = body if name == "bad header" else f"{HEADER}\n{body}\n"
                path = write(self.tmp.name, "bad.csv", "# fixture\n" + text)
                result = run_tool("--template", path, "--plan", env=self.env)
                self.assert_one_line_error(result, f"{path}:{line + 1}: ", needle, "(expected")

    def test_missing_header_and_missing_file(self):
        path = write(self.tmp.name, "empty.csv", "# only a comment\n")
        self.assert_one_line_error(run_tool("--template", path, "--plan", env=self.env),
                                   f"{path}:2: ", "no header")
        missing = os.path.join(self.tmp.name, "nope.csv")
        self.assert_one_line_error(run_tool("--template", missing, "--plan", env=self.env),
                                   f"{missing}: ", "cannot read")

    def test_usage_errors(self):
        path = write(self.tmp.name, "t.csv", GOOD)
        self.assert_one_line_error(run_tool("--template", path, env=self.env), "", "--out")
        self.assert_one_line_error(
            run_tool("--template", path, "--plan", "--iters", "0", env=self.env), "", "--iters")
        self.assert_one_line_error(run_tool("--plan", "--fleetsim", "x", env=self.env), "",
                                   "no experiment")
        nowhere = os.path.join(self.tmp.name, "missing", "out.csv")
        self.assert_one_line_error(run_tool("--template", path, "--out", nowhere, env=self.env),
                                   "", "no such directory")

    def test_measuring_without_torch_is_one_line(self):
        path = write(self.tmp.name, "t.csv", GOOD)
        out = os.path.join(self.tmp.name, "out.csv")
        result = run_tool("--template", path, "--out", out, env=self.env)
        self.assertEqual(result.returncode, 1)
        self.assertNotIn("Traceback", result.stderr)
        self.assertTrue(result.stderr.splitlines()[-1].startswith("error: measuring needs PyTorch"))
        self.assertFalse(os.path.exists(out))

    def fake_fleetsim(self, body: str) -> str:
        path = write(self.tmp.name, "fleetsim", f"#!{sys.executable}\n{body}")
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return path

    def test_runs_fleetsim_export(self):
        log = os.path.join(self.tmp.name, "args.txt")
        fleetsim = self.fake_fleetsim(textwrap.dedent(f"""\
            import sys
            open({log!r}, "w").write(" ".join(sys.argv[1:]))
            out = sys.argv[sys.argv.index("--output") + 1]
            open(out, "w").write({GOOD!r})
            """))
        result = run_tool("exp.toml", "--fleetsim", fleetsim, "--plan", env=self.env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(result.stdout.splitlines()), GOOD_PROFILED)
        args = Path(log).read_text().split()
        self.assertEqual(args[:4], ["workload", "exp.toml", "--export", "kernels"])
        self.assertEqual(args[4], "--output")

    def test_fleetsim_failure_is_one_line(self):
        fleetsim = self.fake_fleetsim(
            "import sys\nprint('error: exp.toml:3: unknown key', file=sys.stderr)\nsys.exit(1)\n")
        result = run_tool("exp.toml", "--fleetsim", fleetsim, "--plan", env=self.env)
        self.assert_one_line_error(result, "", "failed: exp.toml:3: unknown key")


@unittest.skipUnless(importlib.util.find_spec("torch"), "needs torch (CPU is enough)")
class CpuSmokeTests(unittest.TestCase):
    """Runs the measurement path end to end on tiny shapes where torch is installed."""

    def test_measures_on_cpu(self):
        text = textwrap.dedent(f"""\
            {HEADER}
            H100-SXM,bf16,qkv_proj,fwd,gemm:m=32;n=48;k=64;batch=1,1,1,1.0,model
            H100-SXM,bf16,expert_up,wgrad,gemm:m=32;n=48;k=64;batch=2,1,1,1.0,model
            H100-SXM,bf16,core_attention,bwd,attention:batch=1;heads=4;kv_heads=2;seq_q=32;seq_kv=64;head_dim=32;causal=true;flash=true,1,1,1.0,model
            H100-SXM,bf16,core_attention,fwd,attention:batch=1;heads=4;kv_heads=2;seq_q=32;seq_kv=64;head_dim=32;causal=true;flash=false,1,1,1.0,model
            H100-SXM,bf16,input_norm,bwd,elementwise:elements=8192,1,65536,1.0,model
            H100-SXM,bf16,mlp_bias_dropout_add,fwd,elementwise:elements=4096,1,24576,1.0,model
            H100-SXM,bf16,optimizer_step,fwd,elementwise:elements=4096,1,24576,1.0,model
            """)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.csv")
            result = run_tool("--template", write(tmp, "t.csv", text), "--out", out,
                              "--device", "cpu", "--gpu", "H20", "--warmup", "1", "--iters", "2")
            self.assertEqual(result.returncode, 0, result.stderr)
            rows = pk.read_table(out)
        self.assertEqual(len(rows), 7)
        self.assertTrue(all(r.gpu == "H20" and r.time_us > 0 for r in rows))
        self.assertTrue(rows[0].source.startswith("profile_kernels.py torch="))


if __name__ == "__main__":
    unittest.main()
