package main

const sqliteWired = false
