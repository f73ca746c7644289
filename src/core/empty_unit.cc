// Copyright tollgate authors. Keeps a library target non-empty while its folder is.
