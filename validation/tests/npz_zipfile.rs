//! The `.npz` files moe-bench writes open with Python's own zipfile module (what
//! `numpy.load` uses), entry names, bytes and CRCs intact. Needs `python3` (a prerequisite
//! of the test suite): without it this test fails.

use std::process::Command;

use moegen_validation::npy::{Array, Dtype, write_npz};

#[test]
fn python_reads_the_npz() {
    let dir = std::env::temp_dir().join(format!("moegen-npz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("w.npz");
    let values: Vec<u8> = (0..4 * 96).map(|i| (i * 7) as u8).collect();
    let a = Array { dtype: Dtype::U8, shape: vec![4, 96], bytes: values.clone() };
    let b = Array { dtype: Dtype::U8, shape: vec![4, 6], bytes: vec![121; 24] };
    write_npz(&path, &[("values", a.clone()), ("scales", b)]).unwrap();
    let script = "import sys, zipfile\n\
                  z = zipfile.ZipFile(sys.argv[1])\n\
                  assert z.testzip() is None\n\
                  print(','.join(z.namelist()))\n\
                  sys.stdout.buffer.write(z.read('values.npy'))";
    let out = Command::new("python3").arg("-c").arg(script).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (names, npy) = out.stdout.split_at(out.stdout.iter().position(|&c| c == b'\n').unwrap());
    assert_eq!(names, b"values.npy,scales.npy");
    assert_eq!(&npy[1..], a.npy().unwrap().as_slice());
    std::fs::remove_dir_all(&dir).ok();
}
