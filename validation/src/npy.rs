//! Writing arrays for the Python side of the benchmark: `.npy` (NumPy's format, version 1.0)
//! and `.npz` (a zip of `.npy` entries, stored uncompressed).

use std::io::Write;
use std::path::Path;

/// Element types the benchmark writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// `<i4`.
    I32,
    /// `<f4`.
    F32,
    /// `<u2` (bf16 bits).
    U16,
    /// `|u1`.
    U8,
}

impl Dtype {
    fn descr(self) -> &'static str {
        match self {
            Dtype::I32 => "<i4",
            Dtype::F32 => "<f4",
            Dtype::U16 => "<u2",
            Dtype::U8 => "|u1",
        }
    }
    fn size(self) -> usize {
        match self {
            Dtype::I32 | Dtype::F32 => 4,
            Dtype::U16 => 2,
            Dtype::U8 => 1,
        }
    }
}

/// One array: raw little-endian bytes, element type and shape.
#[derive(Clone, Debug)]
pub struct Array {
    /// Element type.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// `product(shape) · size` bytes.
    pub bytes: Vec<u8>,
}

/// Why an array could not be encoded or written.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// The bytes do not fill the shape.
    #[error("{bytes} bytes for shape {shape:?}")]
    Shape {
        /// Bytes given.
        bytes: usize,
        /// The shape.
        shape: Vec<usize>,
    },
    /// The file could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl Array {
    /// The `.npy` encoding (header padded to a multiple of 64 bytes, as NumPy writes it).
    pub fn npy(&self) -> Result<Vec<u8>, NpyError> {
        let n: usize = self.shape.iter().product();
        if n * self.dtype.size() != self.bytes.len() {
            return Err(NpyError::Shape { bytes: self.bytes.len(), shape: self.shape.clone() });
        }
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        let shape = if dims.len() == 1 {
            format!("({},)", dims[0])
        } else {
            format!("({})", dims.join(", "))
        };
        let mut header = format!(
            "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
            self.dtype.descr()
        );
        let unpadded = 10 + header.len() + 1;
        header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
        header.push('\n');
        let mut out = Vec::with_capacity(10 + header.len() + self.bytes.len());
        out.extend_from_slice(b"\x93NUMPY\x01\x00");
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&self.bytes);
        Ok(out)
    }
}

/// Writes one `.npy` file.
pub fn write_npy(path: &Path, a: &Array) -> Result<(), NpyError> {
    std::fs::write(path, a.npy()?).map_err(io(path))
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> NpyError + '_ {
    |source| NpyError::Io { path: path.to_path_buf(), source }
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
        }
    }
    !c
}

/// Writes an `.npz`: `name.npy` entries, stored (zip method 0), ZIP64 when an entry or the
/// archive passes 4 GiB.
pub fn write_npz(path: &Path, arrays: &[(&str, Array)]) -> Result<(), NpyError> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(io(path))?);
    let io = io(path);
    let mut central = Vec::new();
    let mut offset = 0u64;
    for (name, a) in arrays {
        let data = a.npy()?;
        let fname = format!("{name}.npy");
        let crc = crc32(&data);
        let size = data.len() as u64;
        // Local header with ZIP64 sizes in the extra field (sizes 0xFFFFFFFF).
        let mut local = Vec::new();
        local.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        local.extend_from_slice(&45u16.to_le_bytes());
        local.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        local.extend_from_slice(&crc.to_le_bytes());
        local.extend_from_slice(&u32::MAX.to_le_bytes());
        local.extend_from_slice(&u32::MAX.to_le_bytes());
        local.extend_from_slice(&(fname.len() as u16).to_le_bytes());
        local.extend_from_slice(&20u16.to_le_bytes());
        local.extend_from_slice(fname.as_bytes());
        local.extend_from_slice(&1u16.to_le_bytes());
        local.extend_from_slice(&16u16.to_le_bytes());
        local.extend_from_slice(&size.to_le_bytes());
        local.extend_from_slice(&size.to_le_bytes());
        f.write_all(&local).map_err(&io)?;
        f.write_all(&data).map_err(&io)?;
        let mut c = Vec::new();
        c.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        c.extend_from_slice(&45u16.to_le_bytes());
        c.extend_from_slice(&45u16.to_le_bytes());
        c.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        c.extend_from_slice(&crc.to_le_bytes());
        c.extend_from_slice(&u32::MAX.to_le_bytes());
        c.extend_from_slice(&u32::MAX.to_le_bytes());
        c.extend_from_slice(&(fname.len() as u16).to_le_bytes());
        c.extend_from_slice(&28u16.to_le_bytes());
        // Comment length, disk number, internal and external attributes.
        c.extend_from_slice(&[0; 10]);
        c.extend_from_slice(&u32::MAX.to_le_bytes());
        c.extend_from_slice(fname.as_bytes());
        c.extend_from_slice(&1u16.to_le_bytes());
        c.extend_from_slice(&24u16.to_le_bytes());
        c.extend_from_slice(&size.to_le_bytes());
        c.extend_from_slice(&size.to_le_bytes());
        c.extend_from_slice(&offset.to_le_bytes());
        central.extend(c);
        offset += local.len() as u64 + size;
    }
    let cd_offset = offset;
    f.write_all(&central).map_err(&io)?;
    let n = arrays.len() as u64;
    // ZIP64 end of central directory record and locator, then the classic record.
    let mut end = Vec::new();
    end.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
    end.extend_from_slice(&44u64.to_le_bytes());
    end.extend_from_slice(&45u16.to_le_bytes());
    end.extend_from_slice(&45u16.to_le_bytes());
    end.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
    end.extend_from_slice(&n.to_le_bytes());
    end.extend_from_slice(&n.to_le_bytes());
    end.extend_from_slice(&(central.len() as u64).to_le_bytes());
    end.extend_from_slice(&cd_offset.to_le_bytes());
    end.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
    end.extend_from_slice(&0u32.to_le_bytes());
    end.extend_from_slice(&(cd_offset + central.len() as u64).to_le_bytes());
    end.extend_from_slice(&1u32.to_le_bytes());
    end.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    end.extend_from_slice(&[0, 0, 0, 0]);
    end.extend_from_slice(&u16::MAX.to_le_bytes());
    end.extend_from_slice(&u16::MAX.to_le_bytes());
    end.extend_from_slice(&u32::MAX.to_le_bytes());
    end.extend_from_slice(&u32::MAX.to_le_bytes());
    end.extend_from_slice(&0u16.to_le_bytes());
    f.write_all(&end).map_err(&io)?;
    f.flush().map_err(&io)
}
