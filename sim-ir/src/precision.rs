//! Numeric formats of training: what a GEMM operand, a quantized copy and an activation cost
//! in bytes, and which clock tensor work of each format runs at.

/// A training precision (`training.precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Fp32,
    Tf32,
    Bf16,
    Fp16,
    Fp8,
    /// MXFP8 (OCP microscaling): FP8 E4M3 elements with an E8M0 scale per 32 consecutive
    /// elements (Transformer Engine's `MXFP8BlockScaling`, Megatron-Core's `--fp8-recipe
    /// mxfp8`); Blackwell's tensor cores apply the scales, at the FP8 rate.
    Mxfp8,
    /// NVFP4: FP4 E2M1 elements with an E4M3 scale per 16 consecutive elements and an FP32
    /// scale per tensor (Transformer Engine's `NVFP4BlockScaling`, Megatron-Core's
    /// `--fp4-format e2m1 --fp4-recipe nvfp4`).
    Nvfp4,
}

impl Precision {
    pub const ALL: [Precision; 7] = [
        Precision::Fp32,
        Precision::Tf32,
        Precision::Bf16,
        Precision::Fp16,
        Precision::Fp8,
        Precision::Mxfp8,
        Precision::Nvfp4,
    ];

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Bytes of a GEMM operand element (whole bytes: NVFP4's half byte counts as 1 here;
    /// [`Self::quantized_bytes`] counts packed elements and scales).
    pub fn gemm_operand_bytes(self) -> u64 {
        match self {
            Precision::Fp32 | Precision::Tf32 => 4,
            Precision::Fp8 | Precision::Mxfp8 | Precision::Nvfp4 => 1,
            Precision::Bf16 | Precision::Fp16 => 2,
        }
    }

    /// Whether Transformer Engine quantizes GEMM operands from BF16 (FP8, MXFP8, NVFP4).
    pub fn is_quantized(self) -> bool {
        matches!(self, Precision::Fp8 | Precision::Mxfp8 | Precision::Nvfp4)
    }

    /// Bytes of `elements` of one quantized copy with its scales: MXFP8 1 byte each and an
    /// E8M0 byte per 32; NVFP4 half a byte each and an E4M3 byte per 16 (the per-tensor FP32
    /// scale is negligible); FP8 1 byte each (its per-tensor scale, or under `blockwise` an
    /// FP32 scale per 128, is added by the caller). Other precisions: their element size.
    pub fn quantized_bytes(self, elements: u64) -> u64 {
        match self {
            Precision::Mxfp8 => elements + self.block_scale_bytes(elements),
            Precision::Nvfp4 => elements / 2 + self.block_scale_bytes(elements),
            p => elements * p.gemm_operand_bytes(),
        }
    }

    /// Whether each small block of a GEMM operand carries its own scale, which the tensor
    /// cores read in a swizzled layout (MXFP8, NVFP4).
    pub fn is_block_scaled(self) -> bool {
        matches!(self, Precision::Mxfp8 | Precision::Nvfp4)
    }

    /// Bytes of the block scales of `elements` of one quantized copy: an E8M0 byte per 32
    /// (MXFP8), an E4M3 byte per 16 (NVFP4); none for the other precisions.
    pub fn block_scale_bytes(self, elements: u64) -> u64 {
        match self {
            Precision::Mxfp8 => elements / 32,
            Precision::Nvfp4 => elements / 16,
            _ => 0,
        }
    }

    /// Whether tensor work of this type runs at the FP8 sustained clock (`sustained_fp8_mhz`):
    /// FP8 and the block-scaled formats, which use the same tensor-core datapath at a power
    /// draw no GPU file measures separately.
    pub fn uses_fp8_clock(self) -> bool {
        self.is_quantized()
    }

    /// Bytes of an activation element: FP8 training keeps activations in BF16
    /// (Transformer Engine casts only GEMM inputs).
    pub fn activation_bytes(self) -> u64 {
        match self {
            Precision::Fp32 | Precision::Tf32 => 4,
            _ => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Fp8 => "fp8",
            Precision::Mxfp8 => "mxfp8",
            Precision::Nvfp4 => "nvfp4",
        }
    }
}
