//! A checkpoint's safetensors files, read lazily: the headers when opened, then only the
//! bytes of the tensors (or of the expert range of a stacked tensor) a loader asks for.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::Metadata;

use super::source::TensorSource;
use crate::error::{Result, RuntimeError};

/// The safetensors format's header limit (the `safetensors` crate refuses larger headers).
const MAX_HEADER: u64 = 100_000_000;

fn file_error(path: &Path, reason: impl ToString) -> RuntimeError {
    RuntimeError::CheckpointFile { path: path.display().to_string(), reason: reason.to_string() }
}

/// One tensor's entry: its file, dtype, shape and byte range within the file.
#[derive(Clone, Debug)]
struct Entry {
    file: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    /// Absolute byte offset of the tensor's data in the file.
    start: u64,
    /// Bytes of data.
    len: usize,
}

/// The tensors of one or more safetensors files (a checkpoint's shards), by name.
///
/// Opening reads and checks only the headers (the data of a large shard is never read
/// whole): every tensor's byte range must lie inside its file and the ranges must tile the
/// data section exactly, as the safetensors format requires. A name held by two files is an
/// error ([`RuntimeError::DuplicateTensor`]).
#[derive(Clone, Debug)]
pub struct SafetensorsFiles {
    paths: Vec<PathBuf>,
    tensors: HashMap<String, Entry>,
}

/// A tensor's bytes as read, with its name for the checks that name it.
pub(crate) struct Loaded {
    pub(crate) name: String,
    pub(crate) bytes: Vec<u8>,
}

impl SafetensorsFiles {
    /// Opens the given files (one checkpoint, possibly sharded) and reads their headers.
    pub fn open<P: AsRef<Path>>(paths: &[P]) -> Result<Self> {
        let mut out = Self { paths: Vec::with_capacity(paths.len()), tensors: HashMap::new() };
        for path in paths {
            out.add(path.as_ref())?;
        }
        Ok(out)
    }

    /// Opens every `*.safetensors` file of a directory (a Hugging Face model directory: its
    /// `model.safetensors.index.json` is not needed, every header is read instead).
    pub fn open_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| file_error(dir, e))? {
            let path = entry.map_err(|e| file_error(dir, e))?.path();
            if path.is_file() && path.extension().is_some_and(|x| x == "safetensors") {
                paths.push(path);
            }
        }
        paths.sort();
        if paths.is_empty() {
            return Err(file_error(dir, "no .safetensors file in this directory"));
        }
        Self::open(&paths)
    }

    fn add(&mut self, path: &Path) -> Result<()> {
        let mut f = File::open(path).map_err(|e| file_error(path, e))?;
        let file_len = f.metadata().map_err(|e| file_error(path, e))?.len();
        let mut n = [0u8; 8];
        f.read_exact(&mut n).map_err(|e| file_error(path, format!("header length: {e}")))?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER || n > file_len.saturating_sub(8) {
            return Err(file_error(path, format!("header length {n} does not fit the file")));
        }
        let mut header = vec![0u8; n as usize];
        f.read_exact(&mut header).map_err(|e| file_error(path, format!("header: {e}")))?;
        // Metadata's deserializer checks that the byte ranges tile the data section.
        let meta: Metadata = serde_json::from_slice(&header)
            .map_err(|e| file_error(path, format!("invalid safetensors header: {e}")))?;
        let data_start = 8 + n;
        if data_start + meta.data_len() as u64 != file_len {
            return Err(file_error(
                path,
                format!(
                    "the header describes {} data bytes, the file holds {}",
                    meta.data_len(),
                    file_len - data_start
                ),
            ));
        }
        let file = self.paths.len();
        self.paths.push(path.to_path_buf());
        for (name, info) in meta.tensors() {
            let (s, e) = info.data_offsets;
            let entry = Entry {
                file,
                dtype: info.dtype,
                shape: info.shape.clone(),
                start: data_start + s as u64,
                len: e - s,
            };
            if let Some(prev) = self.tensors.get(&name) {
                return Err(RuntimeError::DuplicateTensor {
                    tensor: name,
                    first: self.paths[prev.file].display().to_string(),
                    second: path.display().to_string(),
                });
            }
            self.tensors.insert(name, entry);
        }
        Ok(())
    }

    /// The files opened, in the order given.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Tensors over all files.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the files hold no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Whether a tensor of this name is in one of the files.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Every tensor name, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// A tensor's shape, if it is in the files.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(|e| e.shape.as_slice())
    }

    /// A tensor's dtype as safetensors spells it (`"U8"`, `"F8_E4M3"`, `"BF16"`…).
    pub fn dtype(&self, name: &str) -> Option<String> {
        self.tensors.get(name).map(|e| format!("{:?}", e.dtype))
    }

    /// Reads the elements `[first, first + count)` of the outermost dimension of `name`
    /// (the whole tensor for `0..shape[0]`).
    fn read_range(&self, name: &str, first: usize, count: usize) -> Result<Vec<u8>> {
        let e = self
            .tensors
            .get(name)
            .ok_or_else(|| RuntimeError::MissingTensor { tensor: name.to_string() })?;
        let outer = e.shape.first().copied().unwrap_or(1).max(1);
        let per = e.len / outer;
        if first + count > outer {
            return Err(RuntimeError::CheckpointFile {
                path: self.paths[e.file].display().to_string(),
                reason: format!("{name}: elements {first}..{} of {outer}", first + count),
            });
        }
        let path = &self.paths[e.file];
        let mut f = File::open(path).map_err(|err| file_error(path, err))?;
        f.seek(SeekFrom::Start(e.start + (first * per) as u64))
            .map_err(|err| file_error(path, format!("{name}: {err}")))?;
        let mut bytes = vec![0u8; count * per];
        f.read_exact(&mut bytes).map_err(|err| file_error(path, format!("{name}: {err}")))?;
        Ok(bytes)
    }
}

impl TensorSource for SafetensorsFiles {
    fn describe(&self, name: &str, _accepted: &[Dtype]) -> Result<Option<(Dtype, Vec<usize>)>> {
        Ok(self.tensors.get(name).map(|e| (e.dtype, e.shape.clone())))
    }

    fn read_outer(&self, name: &str, first: usize, count: usize) -> Result<Vec<u8>> {
        self.read_range(name, first, count)
    }

    fn names(&self) -> Option<Vec<String>> {
        Some(self.tensors.keys().cloned().collect())
    }
}

/// Checks a shape, naming the tensor.
pub(crate) fn check_shape(name: &str, actual: &[usize], expected: &[usize]) -> Result<()> {
    if actual == expected {
        Ok(())
    } else {
        Err(RuntimeError::TensorShape {
            tensor: name.to_string(),
            expected: expected.to_vec(),
            actual: actual.to_vec(),
        })
    }
}
