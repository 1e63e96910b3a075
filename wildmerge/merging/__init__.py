"""merging"""
