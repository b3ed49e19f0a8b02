module github.com/skiffci/skiff

go 1.26.8

// node_modules holds the pinned test tools (package.json); some npm packages ship Go files.
ignore ./node_modules
